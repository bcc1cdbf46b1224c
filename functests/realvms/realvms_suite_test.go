// Package realvms_test runs manifests written the way KubeVirt users write
// them through the real virt-launcher binary on real QEMU VMs (TCG where
// the host has no usable KVM): a VirtualMachine with the cloud guest as an
// OCI-archive containerDisk, NoCloud user data, a claim and a forwarded
// port; the cloud guest under EFI with a ConfigDrive; a `kubectl get vmi
// -o yaml` dump of the test guest; and the refusals that start nothing.
// Run it with `make functest` (label "realvms"). The two cloud guest boots
// run at the same time, from one spec, to keep the suite's wall time near
// one cloud boot.
package realvms_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
)

func TestRealVMs(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "real KubeVirt VMs functional suite", Label("realvms"))
}

// suiteDir holds what every launch of the suite shares: the capability and
// containerDisk caches and the image folder listing the cloud guest by its
// oci-archive reference. It is removed after the suite.
var suiteDir string

var _ = BeforeSuite(func() {
	for _, p := range []string{built.Launcher(), cloudGuestArchive(), filepath.Join(built.ImageDir(), "images.json")} {
		_, err := os.Stat(p)
		Expect(err).NotTo(HaveOccurred(), "build first: make build images")
	}
	var err error
	suiteDir, err = os.MkdirTemp("", "cl-realvms-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(os.RemoveAll(suiteDir)).To(Succeed()) })
	ociImages := filepath.Join(suiteDir, "images")
	Expect(os.Mkdir(ociImages, 0o755)).To(Succeed())
	index := `{"` + cloudGuestImage + `": "oci-archive:` + cloudGuestArchive() + `"}` + "\n"
	Expect(os.WriteFile(filepath.Join(ociImages, "images.json"), []byte(index), 0o644)).To(Succeed())
})
