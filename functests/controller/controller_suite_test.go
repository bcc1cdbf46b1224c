// Package controller_test is the functional suite of virt-controller: it
// runs the real virt-controller binary, which runs real virt-launcher
// processes (and, where a VM must boot, real QEMU under libvirt), and
// checks the crash-loop behaviour KubeVirt's VM controller has, from the
// outside: the controller's JSON lines, its status command, the launcher
// folders it leaves in its state folder.
//
// It needs the test guest image (make images) for the specs that boot a
// VM; CRASHLOOP_IMAGE_DIR overrides where it is looked for.
package controller_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "virt-controller functional suite")
}

// bins are the binaries under test, built once for the suite.
type bins struct {
	controller, launcher, imageDir, repo string
}

var suite bins

var _ = SynchronizedBeforeSuite(func() []byte {
	repo := repoRoot()
	dir, err := os.MkdirTemp("", "crashloop-functest-bin-")
	Expect(err).NotTo(HaveOccurred())
	Expect(buildBinaries(repo, dir)).To(Succeed())
	return []byte(dir)
}, func(dir []byte) {
	repo := repoRoot()
	suite = bins{
		controller: filepath.Join(string(dir), "virt-controller"),
		launcher:   filepath.Join(string(dir), "virt-launcher"),
		imageDir:   filepath.Join(repo, "_build", "images"),
		repo:       repo,
	}
	if d := os.Getenv("CRASHLOOP_IMAGE_DIR"); d != "" {
		suite.imageDir = d
	}
})

var _ = SynchronizedAfterSuite(func() {}, func() {
	if suite.controller != "" {
		_ = os.RemoveAll(filepath.Dir(suite.controller))
	}
})

// buildBinaries builds virt-controller and virt-launcher into dir.
func buildBinaries(repo, dir string) error {
	for _, b := range []struct{ out, pkg string }{
		{"virt-controller", "./cmd/virt-controller"},
		{"virt-launcher", "./cmd/virt-launcher"},
		{"virt-launcher-libvirt", "./cmd/virt-launcher-libvirt"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v: %s", b.pkg, err, out)
		}
	}
	return nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
