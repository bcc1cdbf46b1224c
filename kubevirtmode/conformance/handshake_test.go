package conformance_test

import (
	"os"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
)

var _ = Describe("the launcher socket", func() {
	for _, direct := range []bool{true, false} {
		where := "in a podman container laid out as a launcher pod"
		if direct {
			where = "as the binary run directly"
		}
		It("completes virt-handler's handshake, answers Ping and GetDomain, refuses an RPC outside the start/stop path, and exits 0 on SIGTERM with no domain, "+where, func() {
			p := startPod(podSpec{direct: direct})
			start := time.Now()
			c := p.connect() // NewClient: dial, then CmdInfo/Info picks cmd v1
			AddReportEntry("socket-ready", time.Since(start).String())
			_, err := os.Stat(p.socket()[:len(p.socket())-len("launcher-sock")] + "launcher-init-sock")
			Expect(os.IsNotExist(err)).To(BeTrue(), "launcher-init-sock is renamed to launcher-sock when ready")

			Expect(c.Ping()).To(Succeed())
			_, exists, err := c.GetDomain()
			Expect(err).NotTo(HaveOccurred())
			Expect(exists).To(BeFalse(), "no domain before SyncVirtualMachine")

			err = c.PauseVirtualMachine(p.vmi)
			Expect(cmdclient.IsUnimplemented(err)).To(BeTrue(), "want gRPC Unimplemented, got %v", err)
			Expect(err.Error()).To(ContainSubstring("/kubevirt.cmd.v1.Cmd/PauseVirtualMachine"))
			_, _, err = c.GetDomainStats()
			Expect(cmdclient.IsUnimplemented(err)).To(BeTrue(), "want gRPC Unimplemented, got %v", err)

			if direct {
				Expect(p.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
			} else {
				Expect(podmanKill(p, "TERM")).To(Succeed())
			}
			Expect(p.waitExit(30 * time.Second)).To(Equal(0))
			_, err = os.Stat(p.socket())
			Expect(os.IsNotExist(err)).To(BeTrue(), "the socket is removed on exit")
		})
	}

	It("crashes at once with --simulate-crash (exit 2, no socket), as KubeVirt's launcher", func() {
		p := startPod(podSpec{extra: []string{"--simulate-crash"}})
		Expect(p.waitExit(60 * time.Second)).To(Equal(2))
		Expect(p.out.String()).To(ContainSubstring("Simulated virt-launcher crash"))
		_, err := os.Stat(p.socket())
		Expect(os.IsNotExist(err)).To(BeTrue())
	})

	It("answers Sync with our launcher's own words when it refuses the VMI (a bad fault annotation), and stays up for a retry", func() {
		p := startPod(podSpec{direct: true, annotations: map[string]string{"faults.crashloop.dev/qemu-kil": ""}})
		c := p.connect()
		err := c.SyncVirtualMachine(p.vmi, nil)
		Expect(err).To(MatchError(And(ContainSubstring("the launcher refused the VMI (exit 5)"), ContainSubstring(`faults.crashloop.dev/qemu-kil`))))
		Expect(c.Ping()).To(Succeed())
		Expect(c.DeleteDomain(p.vmi)).To(Succeed())
		Expect(p.waitExit(30 * time.Second)).To(Equal(0))
	})

	It("refuses a command line virt-controller would not render, naming the flag", func() {
		p := startPod(podSpec{direct: true, extra: []string{"--grace-period-seconds", "-1"}})
		Expect(p.waitExit(10 * time.Second)).To(Equal(3))
		Expect(p.out.String()).To(ContainSubstring("--grace-period-seconds -1: want 0 or more"))
	})
})
