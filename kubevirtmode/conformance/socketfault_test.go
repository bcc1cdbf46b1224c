package conformance_test

import (
	"net"
	"os"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// dial is the test virt-handler's stale-socket watchdog makes
// (pkg/virt-handler/cache/domain-watcher.go): a plain unix dial, nil when
// something listens.
func dial(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// The cluster lane's H4 row runs this fault under KubeVirt's virt-handler;
// here it is what the fault does to the pod's command socket.
var _ = Describe("launcher-socket-unresponsive in KubeVirt mode", func() {
	It("refuses dials on the pod's command socket `after` Running, its file kept and the guest running, then serves it again `for` later", func() {
		p := runningPod(podSpec{annotations: map[string]string{faults.AnnotationPrefix + "launcher-socket-unresponsive": "after=2s,for=6s"}})
		running := time.Now()
		qemu := p.qemuPIDs()
		Expect(qemu).To(HaveLen(1), "one QEMU")
		Expect(dial(p.socket())).To(Succeed(), "the socket answers before the fault")

		Eventually(func() error { return dial(p.socket()) }).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).
			Should(MatchError(syscall.ECONNREFUSED), "pod log:\n%s", p.out)
		refused := time.Now()
		AddReportEntry("refused after Running", refused.Sub(running).Round(10*time.Millisecond).String())
		Expect(refused.Sub(running)).To(BeNumerically(">=", 1500*time.Millisecond), "not before after=2s")
		_, err := os.Stat(p.socket())
		Expect(err).NotTo(HaveOccurred(), "the socket file stays while it refuses")
		Expect(p.client.Ping()).NotTo(Succeed(), "virt-handler's client gets no answer while the socket refuses")
		Eventually(p.k8sEvents).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).
			Should(ContainElement(ContainSubstring("FaultFired launcher-socket-unresponsive")), "the fault is reported through the notify pipe, which stays")

		Eventually(func() error { return dial(p.socket()) }).WithTimeout(15*time.Second).WithPolling(50*time.Millisecond).
			Should(Succeed(), "pod log:\n%s", p.out)
		back := time.Since(refused)
		AddReportEntry("served again after", back.Round(10*time.Millisecond).String())
		Expect(back).To(BeNumerically(">=", 5*time.Second), "not before for=6s")
		p.client.Close()
		c := p.connect()
		Expect(c.Ping()).To(Succeed())
		d, exists, err := c.GetDomain()
		Expect(err).NotTo(HaveOccurred())
		Expect(exists).To(BeTrue())
		Expect(d.Status.Status).To(Equal(api.Running), "the domain ran on while the socket refused")
		Expect(p.qemuPIDs()).To(Equal(qemu), "the same QEMU")

		Expect(c.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		p.deleteAndExit()
	})

	It("leaves the socket alone at 0% (the control)", func() {
		p := runningPod(podSpec{annotations: map[string]string{faults.AnnotationPrefix + "launcher-socket-unresponsive": "0%for=6s"}})
		Consistently(func() error { return dial(p.socket()) }).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		Expect(p.client.Ping()).To(Succeed())
		Expect(p.client.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		p.deleteAndExit()
	})
})
