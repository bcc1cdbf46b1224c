package conformance_test

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// KubeVirt's kubevirt.io/keep-launcher-alive-after-failure annotation
// becomes --keep-after-failure on compute's command line; with the
// fail-fast one (--simulate-crash) it is a launcher that died before its
// socket in a container that stays: the case virt-handler waits 3 minutes
// for (the cluster lane's H5).
var _ = Describe("a launcher that crashes before its socket, with --keep-after-failure", func() {
	It("keeps the container running with no socket, and SIGTERM ends nothing, as KubeVirt's launcher monitor; SIGKILL ends it", func() {
		p := startPod(podSpec{extra: []string{"--simulate-crash", "--keep-after-failure"}})
		Eventually(p.out.String).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).
			Should(And(ContainSubstring("Simulated virt-launcher crash"), ContainSubstring("keeping the container alive")))
		_, err := os.Stat(p.socket())
		Expect(os.IsNotExist(err)).To(BeTrue(), "no launcher socket: %v", err)

		Expect(podmanKill(p, "TERM")).To(Succeed())
		Eventually(p.out.String).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(ContainSubstring("nothing to stop"))
		Consistently(p.exited).WithTimeout(3*time.Second).WithPolling(100*time.Millisecond).ShouldNot(BeClosed(), "the container after SIGTERM; log:\n%s", p.out)
		_, err = os.Stat(p.socket())
		Expect(os.IsNotExist(err)).To(BeTrue(), "still no launcher socket")

		Expect(podmanKill(p, "KILL")).To(Succeed())
		Expect(p.waitExit(30*time.Second)).To(Equal(137), "the container's status after SIGKILL")
	})
})
