// Package conformance_test drives the launcher image's KubeVirt mode the
// way KubeVirt v1.6.0's virt-handler does, with virt-handler's own code:
// its cmd client (pkg/virt-handler/cmd-client) on the pod's launcher
// socket and its notify server (pkg/virt-handler/notify-server) behind the
// pod's domain-notify-pipe.sock. A "pod" is the image in a podman
// container with a launcher pod's emptyDirs as volumes (private, public,
// sockets, libvirt-runtime, ephemeral-disks, container-disks,
// hotplug-disks) and the compute container's command line as
// virt-controller v1.6.0 renders it; the handshake also runs against the
// binary run directly (no container). Real QEMU under TCG boots the test
// guest. Label "kubevirt".
package conformance_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
)

func TestConformance(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "KubeVirt-mode conformance suite", Label("kubevirt"))
}

// image is the launcher image under test ($KUBEVIRT_MODE_IMAGE overrides).
func image() string {
	if i := os.Getenv("KUBEVIRT_MODE_IMAGE"); i != "" {
		return i
	}
	return "localhost/crashloop/virt-launcher:latest"
}

// monitorBin is the virt-launcher-monitor `make build` made.
func monitorBin() string { return filepath.Join(built.BinDir(), "virt-launcher-monitor") }

// capsCache is the QEMU capability cache shared by the suite's pods, so
// only the first launch probes QEMU (a real pod probes once per pod).
var capsCache string

var _ = BeforeSuite(func() {
	for _, b := range []string{monitorBin(), built.Launcher()} {
		_, err := os.Stat(b)
		Expect(err).NotTo(HaveOccurred(), "%s is missing: run `make build`", b)
	}
	_, err := os.Stat(filepath.Join(built.ImageDir(), "images.json"))
	Expect(err).NotTo(HaveOccurred(), "the guest images are missing: run `make images`")
	if _, err := exec.LookPath("podman"); err == nil {
		if out, err := exec.Command("podman", "image", "exists", image()).CombinedOutput(); err != nil {
			Fail("the launcher image " + image() + " is missing (`make image` builds it): " + string(out))
		}
	}
	capsCache, err = os.MkdirTemp("", "cl-kvmode-caps-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, capsCache)
})
