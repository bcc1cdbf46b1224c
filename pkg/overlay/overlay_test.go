package overlay

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func needQemuImg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed (make deps installs it)")
	}
}

func TestStartThenWaitMakesTheOverlay(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	image := filepath.Join(dir, "base.img")
	if err := os.WriteFile(image, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	p, path, err := Start(image, "raw", dir, "overlay.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "overlay.qcow2") {
		t.Fatalf("overlay at %s", path)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	head := make([]byte, 4)
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no overlay after Wait: %v", err)
	}
	defer f.Close()
	if _, err := f.Read(head); err != nil || string(head) != "QFI\xfb" {
		t.Fatalf("overlay is not qcow2: %q %v", head, err)
	}
	for _, f := range []string{path, path + ".qemu-img.log"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, fi, err)
		}
	}
}

// TestOverlayStaysInItsFolder: a name that is not one path component, or
// a symbolic link planted under the overlay's name, is refused before
// qemu-img runs.
func TestOverlayStaysInItsFolder(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	scratch := filepath.Join(dir, "scratch")
	os.Mkdir(scratch, 0o700)
	image := filepath.Join(dir, "base.img")
	os.WriteFile(image, make([]byte, 1<<20), 0o600)
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("original"), 0o600)
	os.Symlink(victim, filepath.Join(scratch, "planted.qcow2"))
	for _, name := range []string{"../victim", "planted.qcow2", "..", ""} {
		if _, err := Create(image, "raw", scratch, name); err == nil {
			t.Errorf("Create(%q) succeeded", name)
		}
		if _, _, err := Start(image, "raw", scratch, name); err == nil {
			t.Errorf("Start(%q) succeeded", name)
		}
	}
	if data, _ := os.ReadFile(victim); string(data) != "original" {
		t.Fatalf("the file outside was overwritten")
	}
}

func TestWaitReportsQemuImgsFailureWithTheField(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such.img")
	p, _, err := Start(missing, "raw", dir, "o.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	p.Field = "spec.domain.devices.disks[0]"
	err = WaitAll([]Pending{p})
	if err == nil {
		t.Fatal("an overlay of a missing image was made")
	}
	for _, want := range []string{"field spec.domain.devices.disks[0]: ", "creating overlay of " + missing + " with qemu-img: exit status 1: ", "no-such.img"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := Create(missing, "raw", dir, "o2.qcow2"); err == nil || !strings.Contains(err.Error(), "creating overlay of "+missing+" with qemu-img: exit status 1: ") {
		t.Errorf("Create's error %v is not Wait's", err)
	}
}

func TestWaitOnANonChildIsAnError(t *testing.T) {
	if err := (Pending{PID: os.Getpid(), Image: "x"}).Wait(); err == nil {
		t.Fatal("waiting for this process itself succeeded")
	}
}
