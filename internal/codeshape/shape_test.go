package codeshape

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const (
	maxFuncLines   = 100
	maxCmdFileLine = 250
)

// root is the repository: two folders up from this package.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// goFiles lists the repository's non-test Go files, every module
// included, outside _build, testdata and hidden folders.
func goFiles(t *testing.T, r string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != r && (name == "_build" || name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", r, err)
	}
	return files
}

// longFuncs names every function of src longer than limit lines.
func longFuncs(fset *token.FileSet, name string, src []byte, limit int) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var long []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		if n := end.Line - start.Line + 1; n > limit {
			long = append(long, fd.Name.Name+" at line "+strconv.Itoa(start.Line)+": "+strconv.Itoa(n)+" lines")
		}
	}
	return long, nil
}

func TestNoLongFunctionsOrCommandFiles(t *testing.T) {
	r := root(t)
	fset := token.NewFileSet()
	files := goFiles(t, r)
	if len(files) < 50 {
		t.Fatalf("found only %d Go files under %s: is this the repository?", len(files), r)
	}
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(r, p)
		long, err := longFuncs(fset, p, src, maxFuncLines)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		for _, l := range long {
			t.Errorf("%s: function %s (at most %d)", rel, l, maxFuncLines)
		}
		if strings.HasPrefix(rel, "cmd"+string(filepath.Separator)) {
			if n := bytes.Count(src, []byte("\n")); n > maxCmdFileLine {
				t.Errorf("%s: %d lines; a file under cmd/ has at most %d (move the logic into a package)", rel, n, maxCmdFileLine)
			}
		}
	}
}

// TestLongFuncsFindsALongFunction is the rule's negative control: a
// function of limit+1 lines is reported, one of limit lines is not.
func TestLongFuncsFindsALongFunction(t *testing.T) {
	body := func(lines int) string { return strings.Repeat("\t_ = 0\n", lines-2) }
	src := "package p\n\nfunc ok() {\n" + body(maxFuncLines) + "}\n\nfunc long() {\n" + body(maxFuncLines+1) + "}\n"
	long, err := longFuncs(token.NewFileSet(), "p.go", []byte(src), maxFuncLines)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != 1 || !strings.HasPrefix(long[0], "long ") {
		t.Fatalf("longFuncs = %q, want only the function of %d lines", long, maxFuncLines+1)
	}
}

// TestArchitectureNamesEveryFolder keeps ARCHITECTURE.md's rows true to the
// tree: every folder that holds Go code (tests included) is named there in
// backquotes, and every pkg/, internal/, cmd/ or functests/ folder it names
// still exists.
func TestArchitectureNamesEveryFolder(t *testing.T) {
	r := root(t)
	page, err := os.ReadFile(filepath.Join(r, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	folders := map[string]bool{}
	err = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != r && (name == "_build" || name == "testdata" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") {
			rel, _ := filepath.Rel(r, filepath.Dir(p))
			folders[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f := range folders {
		if !bytes.Contains(page, []byte("`"+f+"`")) {
			t.Errorf("ARCHITECTURE.md has no row naming `%s`", f)
		}
	}
	for _, m := range regexp.MustCompile("`((?:pkg|internal|cmd|functests|bench)/[a-z0-9/-]+)`").FindAllSubmatch(page, -1) {
		if f := string(m[1]); !folders[f] {
			t.Errorf("ARCHITECTURE.md names `%s`, which holds no Go code", f)
		}
	}
}
