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
	path := filepath.Join(dir, "overlay.qcow2")
	p, err := Start(image, "raw", path, path+".log")
	if err != nil {
		t.Fatal(err)
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
}

func TestWaitReportsQemuImgsFailureWithTheField(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such.img")
	p, err := Start(missing, "raw", filepath.Join(dir, "o.qcow2"), filepath.Join(dir, "o.log"))
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
	if err := Create(missing, "raw", filepath.Join(dir, "o2.qcow2")); err == nil || !strings.Contains(err.Error(), "creating overlay of "+missing+" with qemu-img: exit status 1: ") {
		t.Errorf("Create's error %v is not Wait's", err)
	}
}

func TestWaitOnANonChildIsAnError(t *testing.T) {
	if err := (Pending{PID: os.Getpid(), Image: "x"}).Wait(); err == nil {
		t.Fatal("waiting for this process itself succeeded")
	}
}
