package faults

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func TestMarkdownTableListsEveryFault(t *testing.T) {
	table := MarkdownTable()
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[2:] {
		cells := strings.Split(line, " | ")
		rows[strings.Trim(cells[0], "| `")] = line
	}
	if len(rows) != len(Catalog()) {
		t.Errorf("table has %d rows, catalog %d faults", len(rows), len(Catalog()))
	}
	for _, d := range Catalog() {
		row, ok := rows[d.Name]
		if !ok {
			t.Errorf("no row for %s", d.Name)
			continue
		}
		for _, p := range d.Params {
			if !strings.Contains(row, "`"+p.Name+"`") {
				t.Errorf("%s row lacks parameter %s: %s", d.Name, p.Name, row)
			}
		}
		for _, o := range d.Outcomes {
			for _, w := range []string{o.Phase, o.Reason} {
				if !strings.Contains(row, w) {
					t.Errorf("%s row lacks %q: %s", d.Name, w, row)
				}
			}
			if o.Exit != ExitNone && !strings.Contains(row, fmt.Sprintf("exit %d", o.Exit)) {
				t.Errorf("%s row lacks exit %d: %s", d.Name, o.Exit, row)
			}
		}
	}
}

func TestPackageDocListsEveryFault(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range Catalog() {
		found := false
		for _, line := range strings.Split(string(doc), "\n") {
			if strings.HasPrefix(line, "//\t"+d.Name+" ") {
				found = true
				for _, o := range d.Outcomes {
					if o.Exit != ExitNone && !strings.Contains(string(doc), fmt.Sprintf("exit %d", o.Exit)) {
						t.Errorf("doc.go lacks exit %d of %s", o.Exit, d.Name)
					}
				}
			}
		}
		if !found {
			t.Errorf("doc.go catalog table has no row for %s", d.Name)
		}
	}
}

func TestCatalogIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range Catalog() {
		if seen[d.Name] || d.Name == "" || d.Description == "" || d.ActsAt == "" || len(d.Outcomes) == 0 {
			t.Errorf("bad catalog entry %+v", d)
		}
		seen[d.Name] = true
		for _, p := range d.Params {
			if p.Required {
				continue
			}
			if p.Type != "disk name" && p.kind.format(p.def) != p.Default {
				t.Errorf("%s.%s: default %q renders as %q", d.Name, p.Name, p.Default, p.kind.format(p.def))
			}
		}
	}
	c := Catalog()
	c[0].Name = "changed"
	c[0].Params[0].Allowed[0] = "changed"
	if Catalog()[0].Name == "changed" || Catalog()[0].Params[0].Allowed[0] == "changed" {
		t.Error("Catalog() must return a copy")
	}
}

func TestREADMEHasTheFaultTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatalf("reading README: %v", err)
	}
	if !strings.Contains(string(readme), MarkdownTable()) {
		t.Errorf("README.md does not contain the fault table; paste this:\n%s", MarkdownTable())
	}
	for _, d := range Catalog() {
		for _, o := range d.Outcomes {
			if !documented(o.Exit) && o.Exit != ExitNone {
				t.Errorf("fault %s promises exit %d, which the launcher does not document", d.Name, o.Exit)
			}
		}
	}
}

// documented reports whether the launcher's exit code table has code.
func documented(code launcherapi.ExitCode) bool {
	for _, row := range launcherapi.ExitCodes() {
		if row.Code == code {
			return true
		}
	}
	return false
}
