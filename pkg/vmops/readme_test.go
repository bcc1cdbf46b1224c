package vmops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	readmeBegin = "<!-- fidelity-table:begin -->\n"
	readmeEnd   = "<!-- fidelity-table:end -->\n"
)

// TestREADMEFidelityTable fails when the README's "Fidelity to KubeVirt
// v1.6.0" table is not FidelityMarkdown(); UPDATE_README=1 rewrites it.
func TestREADMEFidelityTable(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	b, e := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if b < 0 || e < b {
		t.Fatalf("%s: no %q ... %q markers", path, strings.TrimSpace(readmeBegin), strings.TrimSpace(readmeEnd))
	}
	have, want := s[b+len(readmeBegin):e], FidelityMarkdown()
	if have == want {
		return
	}
	if os.Getenv("UPDATE_README") == "1" {
		if err := os.WriteFile(path, []byte(s[:b+len(readmeBegin)]+want+s[e:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's fidelity table differs from FidelityMarkdown(); run UPDATE_README=1 go test ./pkg/vmops -run README. Want:\n%s", path, want)
}
