// Package launcher_test drives the real virt-launcher binary against real
// QEMU VMs (TCG on hosts without hardware virtualization, KVM where it is
// present): boot, phases, the start timeout, signals, bad input, every
// fault of the catalog, and KubeVirt's hook sidecars. Run it with
// `make functest` (label "launcher").
package launcher_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestLauncher(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "virt-launcher functional suite", Label("launcher"))
}
