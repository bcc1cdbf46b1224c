package manifest

import (
	"errors"
	"strings"
	"testing"
)

func TestDocuments(t *testing.T) {
	in := "---\na: 1\n---\n# only a comment\n---\n---\n{\"b\": 2}\n"
	parts, err := Documents([]byte(in), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].N != 1 || string(parts[0].JSON) != `{"a":1}` || parts[1].N != 3 || string(parts[1].JSON) != `{"b":2}` {
		t.Fatalf("parts %+v", parts)
	}
	if parts[0].YAML == nil || !strings.Contains(string(parts[0].YAML), "a: 1") {
		t.Errorf("YAML of the first part %q", parts[0].YAML)
	}
	_, err = Documents([]byte("a: 1\n---\nb: [\n"), "bad.yaml")
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "bad.yaml: document 2: not valid YAML") {
		t.Errorf("bad second document: %v", err)
	}
	if parts, err := Documents([]byte("# nothing\n"), "empty.yaml"); err != nil || len(parts) != 0 {
		t.Errorf("comments only: %+v, %v", parts, err)
	}
}
