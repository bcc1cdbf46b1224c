package crashloop_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestLocalLane(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "local crash-loop lane", Label("local"))
}

// bins are the binaries under test and where the lane writes its output.
type bins struct {
	controller, launcher, imageDir, artifacts string
}

var suite bins

var laneStart time.Time

var _ = SynchronizedBeforeSuite(func() []byte {
	dir, err := os.MkdirTemp("", "crashloop-lane-bin-")
	Expect(err).NotTo(HaveOccurred())
	for _, b := range []struct{ out, pkg string }{
		{"virt-controller", "./cmd/virt-controller"},
		{"virt-launcher", "./cmd/virt-launcher"},
		{"virt-launcher-libvirt", "./cmd/virt-launcher-libvirt"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = repoRoot()
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build %s: %s", b.pkg, out)
	}
	return []byte(dir)
}, func(dir []byte) {
	laneStart = time.Now()
	repo := repoRoot()
	suite = bins{
		controller: filepath.Join(string(dir), "virt-controller"),
		launcher:   filepath.Join(string(dir), "virt-launcher"),
		imageDir:   filepath.Join(repo, "_build", "images"),
		artifacts:  filepath.Join(repo, "_build", "artifacts"),
	}
	if d := os.Getenv("CRASHLOOP_IMAGE_DIR"); d != "" {
		suite.imageDir = d
	}
	if d := os.Getenv("CRASHLOOP_ARTIFACTS"); d != "" {
		suite.artifacts = d
	}
	Expect(os.MkdirAll(suite.artifacts, 0o755)).To(Succeed())
	_, err := os.Stat(filepath.Join(suite.imageDir, "images.json"))
	Expect(err).NotTo(HaveOccurred(), "the local lane boots the test guest: build it with `make images` (or set CRASHLOOP_IMAGE_DIR)")
})

var _ = SynchronizedAfterSuite(func() {
	fmt.Fprintf(GinkgoWriter, "local lane wall time: %s\n", time.Since(laneStart).Round(100*time.Millisecond))
}, func() {
	if suite.controller != "" {
		_ = os.RemoveAll(filepath.Dir(suite.controller))
	}
})

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
