package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestName(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b", "../x", "/x", "x/", "a\x00b"} {
		if Name(n) == nil {
			t.Errorf("Name(%q) accepted", n)
		}
	}
	for _, n := range []string{"x", "...", "a..b", "disk.img", "..x"} {
		if err := Name(n); err != nil {
			t.Errorf("Name(%q): %v", n, err)
		}
	}
}

// TestLinksDoNotLeadOut: a link planted under a name, or a folder that
// is a link out, is not followed out of the folder by any function.
func TestLinksDoNotLeadOut(t *testing.T) {
	top := t.TempDir()
	dir, outside := filepath.Join(top, "dir"), filepath.Join(top, "outside")
	os.Mkdir(dir, 0o700)
	os.Mkdir(outside, 0o700)
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("original"), 0o600)
	os.Symlink(victim, filepath.Join(dir, "file"))
	os.Symlink(outside, filepath.Join(dir, "folder"))
	if _, err := WriteFile(dir, []byte("x"), 0o600, "file"); err == nil {
		t.Error("WriteFile over a planted link succeeded")
	}
	if _, err := Reserve(dir, 0o600, "folder", "new"); err == nil {
		t.Error("Reserve through a linked folder succeeded")
	}
	if _, err := MkdirAll(dir, 0o700, "folder", "sub"); err == nil {
		t.Error("MkdirAll through a linked folder succeeded")
	}
	if _, _, err := Stat(dir, "folder", "victim"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat through a linked folder: %v, want an escape error", err)
	}
	if _, _, err := Stat(dir, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a missing file: %v, want fs.ErrNotExist", err)
	}
	if data, _ := os.ReadFile(victim); string(data) != "original" {
		t.Error("the file outside was changed")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside holds %d entries, want 1", len(entries))
	}
	p, err := WriteFile(dir, []byte("x"), 0o600, "ok")
	if fi, serr := os.Stat(p); err != nil || serr != nil || fi.Mode().Perm() != 0o600 || p != filepath.Join(dir, "ok") {
		t.Errorf("WriteFile: %s %v %v", p, err, serr)
	}
}

// TestOpenFile: a log opened for appending or emptied through OpenFile
// is refused when its name is a link out of the folder, and gets mode
// 0600 under a permissive umask even when it existed wider.
func TestOpenFile(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	top := t.TempDir()
	dir, victim := filepath.Join(top, "logs"), filepath.Join(top, "victim")
	os.Mkdir(dir, 0o700)
	os.WriteFile(victim, []byte("original"), 0o644)
	os.Symlink(victim, filepath.Join(dir, "planted.log"))
	for _, flag := range []int{os.O_WRONLY | os.O_CREATE | os.O_APPEND, os.O_WRONLY | os.O_CREATE | os.O_TRUNC} {
		if f, _, err := OpenFile(dir, flag, 0o600, "planted.log"); err == nil {
			f.Close()
			t.Errorf("OpenFile(%#x) of a link out of the folder succeeded", flag)
		}
		if _, _, err := OpenFile(dir, flag, 0o600, "../victim"); err == nil {
			t.Errorf("OpenFile(%#x, ../victim) succeeded", flag)
		}
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o644 {
		t.Errorf("the file outside changed mode: %v", fi.Mode().Perm())
	}
	if data, _ := os.ReadFile(victim); string(data) != "original" {
		t.Error("the file outside was changed")
	}
	wide := filepath.Join(dir, "console.log")
	os.WriteFile(wide, []byte("old run"), 0o644)
	f, p, err := OpenFile(dir, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600, "console.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, err := os.Stat(p)
	if err != nil || p != wide || fi.Mode().Perm() != 0o600 || fi.Size() != 0 {
		t.Errorf("OpenFile: %s %v %v, want %s empty with mode 0600", p, fi, err, wide)
	}
	f, p, err = OpenFile(dir, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600, "new.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a new log: %v %v, want mode 0600", fi, err)
	}
}

func TestOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		dir  bool
		mode os.FileMode
		ok   bool
	}{{"f600", false, 0o600, true}, {"f644", false, 0o644, false}, {"d700", true, 0o700, true}, {"d755", true, 0o755, false}, {"d600", true, 0o600, false}} {
		p := filepath.Join(dir, tc.name)
		var err error
		if tc.dir {
			err = os.Mkdir(p, tc.mode)
		} else {
			err = os.WriteFile(p, nil, tc.mode)
		}
		if err == nil {
			err = os.Chmod(p, tc.mode)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := OwnerOnly(p); (got == nil) != tc.ok {
			t.Errorf("%s: OwnerOnly = %v, want ok %v", tc.name, got, tc.ok)
		}
	}
	if OwnerOnly(filepath.Join(dir, "missing")) == nil {
		t.Error("a missing file is owner-only")
	}
}
