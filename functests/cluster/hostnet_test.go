package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/pkg/netsnap"
)

// virtAPIAddress is virt-api's Service address, which cluster-lite puts on
// its own namespace's lo (clusterlite up --virt-api-ip's default).
const virtAPIAddress = "10.254.0.10/32"

// hostNetwork is the host namespace's addresses, routes (v4 and v6, all
// tables), rules, named namespaces and nftables/iptables rules.
func hostNetwork() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := netsnap.Take(ctx)
	Expect(err).NotTo(HaveOccurred())
	return s
}

// inNetNS runs a command in the stack's network namespace (nsenter enters
// it in the child only) and returns its output.
func (s *liteStack) inNetNS(args ...string) string {
	out, err := exec.Command("nsenter", append([]string{"--net=" + s.netns}, args...)...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "nsenter --net=%s %s: %s", s.netns, strings.Join(args, " "), out)
	return string(out)
}

// checkNetworkGone checks, once the stack has ended, that its namespace
// is gone (no process or thread anywhere is in it) and the host's network
// is as it was before the stack.
func (s *liteStack) checkNetworkGone() {
	Expect(s.netns).NotTo(BeEmpty(), "clusterlite up printed no NETNS=")
	_, err := os.Stat(s.netns)
	Expect(os.IsNotExist(err)).To(BeTrue(), "%s still there after the stack ended", s.netns)
	Expect(hostNetwork()).To(Equal(s.netBefore), "the host's network after the stack differs from before it")
}

// inNamespace lists the threads (/proc/PID/task/TID) whose network
// namespace is ns ("net:[inode]").
func inNamespace(ns string) []string {
	links, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/ns/net")
	var in []string
	for _, l := range links {
		if t, err := os.Readlink(l); err == nil && t == ns {
			in = append(in, strings.TrimSuffix(l, "/ns/net"))
		}
	}
	return in
}

var _ = Describe("cluster-lite leaves the host's network alone", Label("hostnet"), func() {
	BeforeEach(func() {
		if lite == nil {
			Skip("KUBECONFIG points at another cluster: no cluster-lite of this lane's to check")
		}
	})

	It("keeps the host namespace's addresses, routes and rules as they were while it runs; virt-api's address is only inside its own namespace", func() {
		Expect(hostNetwork()).To(Equal(lite.netBefore), "the host's network while cluster-lite runs differs from before it")
		host, err := exec.Command("ip", "-o", "addr").CombinedOutput()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(host)).NotTo(ContainSubstring(" "+virtAPIAddress+" "), "virt-api's address on the host")
		Expect(lite.inNetNS("ip", "-o", "addr", "show", "dev", "lo")).To(ContainSubstring(" "+virtAPIAddress+" "), "virt-api's address in the stack's namespace")
		u, err := url.Parse(lite.server)
		Expect(err).NotTo(HaveOccurred())
		Expect(u.Hostname()).To(Equal("127.0.0.1"), "the kubeconfig's server is on the host's loopback")
		AddReportEntry("cluster-hostnet", fmt.Sprintf("host network unchanged while cluster-lite runs (%d bytes of ip addr/route/rule/netns/iptables); %s only in %s",
			len(lite.netBefore), virtAPIAddress, lite.netns))
	})

	It("leaves no namespace, address or process behind after a SIGKILL of clusterlite up", Label("sigkill"), func() {
		// A second stack: it has a namespace of its own, so it shares no
		// address with the lane's; bare launcher processes and its own
		// node name keep it off the lane's podman containers.
		s := runLite(liteBinDir(), "clusterlite-sigkill.log", "--launcher-runtime", "process", "--node-name", "sigkill-node")
		DeferCleanup(func() { _ = os.RemoveAll(s.stateDir) }) // a killed stack cannot remove its folder
		ns, err := os.Readlink(s.netns)
		Expect(err).NotTo(HaveOccurred())
		Expect(inNamespace(ns)).NotTo(BeEmpty())
		Expect(s.inNetNS("ip", "-o", "addr", "show", "dev", "lo")).To(ContainSubstring(" " + virtAPIAddress + " "))
		Expect(s.pids).NotTo(BeEmpty())

		By(fmt.Sprintf("SIGKILL of clusterlite up (pid %d) with %d processes of its own running in %s", s.proc.PID(), len(s.pids), ns))
		killed := time.Now()
		Expect(s.proc.Signal(syscall.SIGKILL)).To(Succeed())
		Eventually(s.proc.Done()).WithTimeout(10 * time.Second).Should(BeClosed())
		Eventually(alive).WithArguments(s.pids).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(BeEmpty(), "the stack's processes outlive a SIGKILL of clusterlite up")
		Eventually(inNamespace).WithArguments(ns).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(BeEmpty(), "threads left in the stack's namespace")
		gone := time.Since(killed)
		s.checkNetworkGone()
		u, err := url.Parse(s.server)
		Expect(err).NotTo(HaveOccurred())
		_, err = net.DialTimeout("tcp", u.Host, time.Second)
		Expect(err).To(HaveOccurred(), "the API server's forward %s still answers", u.Host)
		AddReportEntry("cluster-sigkill", fmt.Sprintf("SIGKILL of clusterlite up: its %d processes and namespace %s gone after %v; host network as before",
			len(s.pids), ns, gone.Round(time.Millisecond)))
	})
})

// alive lists those of pids that still name a process.
func alive(pids []int) []int {
	var left []int
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			left = append(left, pid)
		}
	}
	return left
}
