package ctlharness

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/crashloop-harness/crashloop/functests/built"
)

// Built returns the binaries of `make build` and the guest images' folder
// (see package built for the overrides). The error names the missing
// binary and the make target that makes it; a missing guest image is not
// an error here (the specs that boot a VM say so themselves).
func Built() (Binaries, error) {
	bin := built.BinDir()
	b := Binaries{
		Controller: filepath.Join(bin, "virt-controller"),
		Launcher:   built.Launcher(),
		ImageDir:   built.ImageDir(),
	}
	for _, p := range []string{b.Controller, b.Launcher, filepath.Join(filepath.Dir(b.Launcher), "virt-launcher-convert"), filepath.Join(filepath.Dir(b.Launcher), "virt-launcher-libvirt")} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("the suite runs the built binaries: %w (run `make build`, or set CRASHLOOP_BIN_DIR)", err)
		}
	}
	return b, nil
}
