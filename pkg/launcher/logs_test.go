package launcher

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"k8s.io/utils/clock"
)

// TestLogsDoNotFollowPlantedLinks: the console log emptied at each start
// and the libvirt log made before libvirt appends to it are opened in
// their folder only: a symbolic link planted under their names, leading
// out of the folder, is neither emptied nor written, and the logs made
// are 0600 under a permissive umask.
func TestLogsDoNotFollowPlantedLinks(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	top := t.TempDir()
	dir, victim := filepath.Join(top, "logs"), filepath.Join(top, "victim")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	console, libvirtLog := filepath.Join(dir, "console.log"), filepath.Join(dir, "console.libvirt.log")
	for _, l := range []string{console, libvirtLog} {
		if err := os.Symlink(victim, l); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ownerOnlyLog(libvirtLog, log)
	ctx, cancel := context.WithCancel(context.Background())
	lines := watchConsole(clock.RealClock{}, console, log)(ctx)
	cancel()
	for range lines {
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "original" {
		t.Errorf("the file a planted link points at: %q %v, want it untouched", data, err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the file a planted link points at: %v %v, want its mode kept", fi, err)
	}

	for _, l := range []string{console, libvirtLog} {
		os.Remove(l)
	}
	if err := os.WriteFile(console, []byte("a previous run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ownerOnlyLog(libvirtLog, log)
	if err := emptyConsole(console); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{console, libvirtLog} {
		fi, err := os.Lstat(l)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 0 {
			t.Errorf("%s: %v %v, want an empty regular file of mode 0600", l, fi, err)
		}
	}
}
