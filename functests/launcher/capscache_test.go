package launcher_test

import (
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

var _ = Describe("the QEMU capability cache", func() {
	It("is saved once the domain is defined, so a launcher SIGKILLed while its VMI runs leaves it to the next launch, which does not probe QEMU", func() {
		cache := filepath.Join(GinkgoT().TempDir(), "qemu-capabilities")
		first := Start(VMISpec{}, "--cache-dir", cache)
		first.WaitFor(launcherapi.EventRunning, 90*time.Second)
		Expect(first.LogLines("probing QEMU capabilities")).To(HaveLen(1), "a new cache: the first launch probes")
		Expect(qemu.CapsCached(cache)).To(BeTrue(), "the probed capabilities are in the cache while the VMI runs")
		first.Signal(syscall.SIGKILL) // as virt-handler's Kill ends our launcher in KubeVirt mode
		Expect(first.Exit(10 * time.Second)).To(Equal(-1))
		Eventually(first.RuntimeEntries).WithTimeout(5 * time.Second).Should(BeEmpty())

		second := Start(VMISpec{}, "--cache-dir", cache)
		second.WaitFor(launcherapi.EventRunning, 90*time.Second)
		Expect(second.LogLines("probing QEMU capabilities")).To(BeEmpty(), "the second launch finds the first one's capabilities")
		second.Signal(syscall.SIGTERM)
		expectFinal(second, "Succeeded", "Stopped", 0)
	})
})
