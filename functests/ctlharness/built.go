package ctlharness

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// RepoRoot is the repository's top folder (two up from this package).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Built returns what `make build images` made, so that every suite tests
// the binaries users run (the pure-Go launcher front among them) and none
// builds its own copy: the binaries in _build/bin ($CRASHLOOP_BIN_DIR
// overrides) and the guest images in _build/images ($CRASHLOOP_IMAGE_DIR
// overrides). The error names what is missing and the make target that
// makes it; a missing guest image is not an error (ImageDir is then
// returned as is, and the specs that boot a VM say so themselves).
func Built() (Binaries, error) {
	repo := RepoRoot()
	bin := filepath.Join(repo, "_build", "bin")
	if d := os.Getenv("CRASHLOOP_BIN_DIR"); d != "" {
		bin = d
	}
	b := Binaries{
		Controller: filepath.Join(bin, "virt-controller"),
		Launcher:   filepath.Join(bin, "virt-launcher"),
		ImageDir:   filepath.Join(repo, "_build", "images"),
	}
	if d := os.Getenv("CRASHLOOP_IMAGE_DIR"); d != "" {
		b.ImageDir = d
	}
	for _, p := range []string{b.Controller, b.Launcher, filepath.Join(bin, "virt-launcher-libvirt")} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("the suite runs the built binaries: %w (run `make build`, or set CRASHLOOP_BIN_DIR)", err)
		}
	}
	return b, nil
}
