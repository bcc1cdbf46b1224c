package kvdiff

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/converter"
)

// readmeBlocks are the README's generated parts this package keeps true:
// the launcher's supported fields and the differential's rules.
func readmeBlocks() map[string]string {
	var fields strings.Builder
	for _, f := range converter.SupportedFields() {
		fmt.Fprintf(&fields, "- `%s`\n", f)
	}
	var rules strings.Builder
	for _, r := range Rules() {
		fmt.Fprintf(&rules, "- **%s**, %s\n", r.Name, r.Why)
	}
	return map[string]string{"supported-fields": fields.String(), "kvdiff-rules": rules.String()}
}

// TestREADMEBlocks fails when a generated README block differs from the
// code; UPDATE_README=1 rewrites it.
func TestREADMEBlocks(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	changed := false
	for name, want := range readmeBlocks() {
		begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
		b, e := strings.Index(s, begin), strings.Index(s, end)
		if b < 0 || e < b {
			t.Fatalf("%s: no %q ... %q markers", path, strings.TrimSpace(begin), end)
		}
		if s[b+len(begin):e] == want {
			continue
		}
		if os.Getenv("UPDATE_README") != "1" {
			t.Fatalf("%s's %s block differs from the code; run UPDATE_README=1 go test ./pkg/kvdiff -run README. Want:\n%s", path, name, want)
		}
		s, changed = s[:b+len(begin)]+want+s[e:], true
	}
	if !changed {
		return
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
