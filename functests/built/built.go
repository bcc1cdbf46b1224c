// Package built finds what `make build images` made, for the functional
// suites and benchmarks, so that each of them runs the artefacts users run
// and none builds its own: the repository's root, the binaries
// ($CRASHLOOP_BIN_DIR overrides _build/bin; $LAUNCHER_BIN overrides the
// launcher alone) and the guest images ($CRASHLOOP_IMAGE_DIR overrides
// _build/images).
package built

import (
	"os"
	"path/filepath"
	"runtime"
)

// Root is the repository's top folder (two up from this package).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Path is a path below the repository's _build folder.
func Path(parts ...string) string {
	return filepath.Join(append([]string{Root(), "_build"}, parts...)...)
}

// BinDir is where the binaries are: $CRASHLOOP_BIN_DIR, else _build/bin.
func BinDir() string {
	if d := os.Getenv("CRASHLOOP_BIN_DIR"); d != "" {
		return d
	}
	return Path("bin")
}

// Launcher is the virt-launcher binary: $LAUNCHER_BIN, else the one in
// BinDir.
func Launcher() string {
	if b := os.Getenv("LAUNCHER_BIN"); b != "" {
		return b
	}
	return filepath.Join(BinDir(), "virt-launcher")
}

// ImageDir is the guest images' folder: $CRASHLOOP_IMAGE_DIR, else
// _build/images.
func ImageDir() string {
	if d := os.Getenv("CRASHLOOP_IMAGE_DIR"); d != "" {
		return d
	}
	return Path("images")
}
