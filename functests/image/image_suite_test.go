// Package image_test runs the virt-launcher container image
// (localhost/crashloop/virt-launcher:latest, built by `make image`) with
// podman on the test guest, as KubeVirt runs its launcher in a pod's
// compute container: unprivileged (runc, explicit rlimits, no /dev/kvm
// unless the node has usable KVM) and as KubeVirt's non-root launcher user
// (the image's USER, qemu 107:107, which every process of the launch, QEMU
// included, must run as), events read from the container's
// stdout. It checks the boot to Running and GuestReady, a graceful stop on
// SIGTERM, that SIGKILL of the container leaves no QEMU, no container
// and no folder, and that a memory limit below QEMU's needs gets QEMU
// OOM-killed by the kernel (label "oom"). It builds nothing: `make functest` builds the image first
// (label "image").
package image_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
)

func TestImage(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "virt-launcher image functional suite", Label("image"))
}

// Image is the image under test: $CRASHLOOP_LAUNCHER_IMAGE, else the
// default image (Debian 12's libvirt and QEMU); `make image
// LIBVIRT_PAIR=backports` builds localhost/crashloop/virt-launcher:backports.
var Image = func() string {
	if i := os.Getenv("CRASHLOOP_LAUNCHER_IMAGE"); i != "" {
		return i
	}
	return "localhost/crashloop/virt-launcher:latest"
}()

// capsCache is a QEMU capability cache shared by the suite's containers
// (mounted at the launcher's --cache-dir), so that only the first launch
// probes QEMU.
var capsCache string

var _ = BeforeSuite(func() {
	if _, err := exec.LookPath("podman"); err != nil {
		Skip("podman is not installed: `make image` installs it and builds " + Image)
	}
	// make image keeps the image in an overlay store of its own when the
	// user's store is not overlay, and names it in this file.
	if conf := built.Path("containers", "storage.conf"); fileExists(conf) {
		Expect(os.Setenv("CONTAINERS_STORAGE_CONF", conf)).To(Succeed())
	}
	out, err := exec.Command("podman", "image", "inspect", "--format", "{{.Id}}", Image).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s is not built: run `make image` first\n%s", Image, out)
	Expect(fileExists(filepath.Join(built.ImageDir(), "images.json"))).To(BeTrue(), "the test guest is not built: run `make images` first")
	capsCache, err = os.MkdirTemp("", "cl-image-caps-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, capsCache)
})

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
