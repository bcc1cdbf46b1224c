package controller

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/crashloop-harness/crashloop/internal/confine"
)

// TestLauncherFilesAreOwnerOnly: the launch folder, the VMI written in it
// and the launcher's events and log are 0700 and 0600 under a permissive
// umask, as is the state folder.
func TestLauncherFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	state := filepath.Join(t.TempDir(), "state")
	if _, err := OpenStore(state, false); err != nil {
		t.Fatal(err)
	}
	dir := LauncherDir(state, Key{Namespace: "ns", Name: "vm"}, 1, "uid")
	stdout, stderr, err := createLauncherFiles(dir, []byte("kind: VirtualMachineInstance\n"))
	if err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	stderr.Close()
	for _, p := range []string{state, filepath.Join(state, "vms"), filepath.Join(state, "launchers"), string(dir), filepath.Dir(string(dir)), dir.Manifest(), dir.Events(), dir.Log()} {
		if err := confine.OwnerOnly(p); err != nil {
			t.Error(err)
		}
	}
}

// TestControlSocketIsOwnerOnly: the control socket, which starts and stops
// VMs, is 0600 under a permissive umask.
func TestControlSocketIsOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	// A short folder: a unix socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := OpenStore(filepath.Join(dir, "s"), false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&Controller{store: store}).listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Stat(store.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket: mode %v, want a socket of mode 0600", fi.Mode())
	}
}
