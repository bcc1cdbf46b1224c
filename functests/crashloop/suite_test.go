package crashloop_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
)

func TestLocalLane(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "local crash-loop lane", Label("local"))
}

// bins are the binaries under test (those of make build) and where the
// lane writes its output.
type bins struct {
	controller, launcher, imageDir, artifacts string
}

var suite bins

var laneStart time.Time

var _ = BeforeSuite(func() {
	laneStart = time.Now()
	b, err := ctlharness.Built()
	Expect(err).NotTo(HaveOccurred())
	suite = bins{
		controller: b.Controller,
		launcher:   b.Launcher,
		imageDir:   b.ImageDir,
		artifacts:  built.Path("artifacts"),
	}
	if d := os.Getenv("CRASHLOOP_ARTIFACTS"); d != "" {
		suite.artifacts = d
	}
	Expect(os.MkdirAll(suite.artifacts, 0o755)).To(Succeed())
	_, err = os.Stat(filepath.Join(suite.imageDir, "images.json"))
	Expect(err).NotTo(HaveOccurred(), "the local lane boots the test guest: build it with `make images` (or set CRASHLOOP_IMAGE_DIR)")
})

var _ = AfterSuite(func() {
	fmt.Fprintf(GinkgoWriter, "local lane wall time: %s\n", time.Since(laneStart).Round(100*time.Millisecond))
})
