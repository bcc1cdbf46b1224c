// Package controller_test is the functional suite of virt-controller: it
// runs the real virt-controller binary, which runs real virt-launcher
// processes (and, where a VM must boot, real QEMU under libvirt), and
// checks the crash-loop behaviour KubeVirt's VM controller has, from the
// outside: the controller's JSON lines, its status command, the launcher
// folders it leaves in its state folder.
//
// It runs the binaries of `make build` (CRASHLOOP_BIN_DIR overrides) and
// needs the test guest image (make images) for the specs that boot a VM;
// CRASHLOOP_IMAGE_DIR overrides where it is looked for.
package controller_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "virt-controller functional suite")
}

// bins are the binaries under test (those of make build) and the
// repository.
type bins struct {
	controller, launcher, imageDir, repo string
}

var suite bins

var _ = BeforeSuite(func() {
	b, err := ctlharness.Built()
	Expect(err).NotTo(HaveOccurred())
	suite = bins{controller: b.Controller, launcher: b.Launcher, imageDir: b.ImageDir, repo: built.Root()}
})
