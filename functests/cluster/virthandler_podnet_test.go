package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

var _ = Describe("KubeVirt's own virt-handler with the default pod network", Label("virt-handler"), func() {
	It("runs a test-guest VMI with the pod network and masquerade to Running by virt-handler, with the pod's eth0 at status.podIP, virt-handler's tap0 and NAT rules in the pod, the guest's address from KubeVirt's DHCP server, and deletion leaves no veth", func(ctx SpecContext) {
		s, kc := virtHandlerStack(ctx)
		name := fmt.Sprintf("vh-podnet-%d", time.Now().Unix()%100000)
		// harness.dhcp: the guest takes eth0's address by DHCP and prints the lease.
		vmi := testguest.VMI(testguest.Spec{Name: name, Namespace: namespace(), KernelArgs: testguest.KernelArgs + " harness.dhcp"})
		vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
		vmi.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
		created := time.Now()
		vmi, err := kc.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { // a failed spec leaves no VMI for the next one on the stack
			_ = kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})
		})
		DeferCleanup(func() { // first, while the pod still runs: a failure's logs for CI's reader
			dir := filepath.Join(artifacts, "virt-handler-podnet")
			keepPodLogs(s, dir)
			if CurrentSpecReport().Failed() && os.MkdirAll(dir, 0o755) == nil {
				if data, err := os.ReadFile(filepath.Join(s.stateDir, "control-plane", "logs", "virt-handler.log")); err == nil {
					_ = os.WriteFile(filepath.Join(dir, "virt-handler.log"), data, 0o644)
				}
			}
		})

		By("the VMI reaches Running, its status virt-handler's")
		vmi, pod, bound := waitVHRunning(ctx, kc, vmi, 4*time.Minute, func() string {
			return fmt.Sprintf("VMI %s; the stack log %s on it:\n%s\nvirt-handler's log on it:\n%s", name, s.logPath, linesWith(s.logPath, name, 40),
				linesWith(filepath.Join(s.stateDir, "control-plane", "logs", "virt-handler.log"), name, 40))
		})
		running := time.Now()
		managers := managersOf(vmi.ManagedFields)
		Expect(managers).To(ContainElement("virt-handler"), "managedFields of VMI %s", name)
		Expect(managers).NotTo(ContainElement("clusterlite"), "the node agent writes nothing to VMIs in this mode")
		Expect(vmi.Spec.Domain.Devices.Interfaces).To(HaveLen(1))
		Expect(vmi.Spec.Domain.Devices.Interfaces[0].Masquerade).NotTo(BeNil(), "the VMI's interface binding")

		By("the pod's address is on the pod network, and is the pod's eth0 in its network namespace")
		pod, err = kc.CoreV1().Pods(namespace()).Get(ctx, pod.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		podIP, err := netip.ParseAddr(pod.Status.PodIP)
		Expect(err).NotTo(HaveOccurred(), "status.podIP %q of pod %s", pod.Status.PodIP, pod.Name)
		Expect(nodeagent.DefaultPodSubnet.Contains(podIP)).To(BeTrue(), "status.podIP %s in %s", podIP, nodeagent.DefaultPodSubnet)
		Expect(pod.Status.PodIPs).To(Equal([]k8sv1.PodIP{{IP: podIP.String()}}))
		compute := computeProcess(ctx, s, pod)
		podNS := fmt.Sprintf("/proc/%d/ns/net", compute.PID)
		hostNS, err := os.Readlink("/proc/self/ns/net")
		Expect(err).NotTo(HaveOccurred())
		Expect(os.Readlink(podNS)).NotTo(Equal(hostNS), "the pod's network namespace is not the host's")
		Expect(os.Readlink(podNS)).NotTo(Equal(mustReadlink(s.netns)), "the pod's network namespace is not the stack's")
		Expect(ipIn(podNS, "-4", "-o", "addr", "show", "dev", "eth0")).To(ContainSubstring(" "+podIP.String()+"/24 "), "the pod's eth0")
		Expect(ipIn(podNS, "route", "show", "default")).To(ContainSubstring("via 10.244.0.1 dev eth0"))

		By("virt-handler reports the pod's IP as the VMI interface's (masquerade: the guest is reached at the pod's address)")
		Eventually(func() string {
			got, err := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(got.Status.Interfaces) == 0 {
				return fmt.Sprint(err)
			}
			i := got.Status.Interfaces[0]
			return i.Name + " " + i.IP
		}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Equal("default "+podIP.String()), "VMI %s status.interfaces[0]", name)

		By("virt-handler's phase 1 made tap0 and the masquerade bridge in the pod, and its NAT rules")
		links := ipIn(podNS, "-o", "link")
		Expect(links).To(MatchRegexp(`\d+: tap0[:@]`), "the pod's links")
		Expect(links).To(MatchRegexp(`\d+: k6t-eth0[:@]`), "the pod's links")
		// Without the Root feature gate tap0 is the non-root launcher's
		// (107), which attaches QEMU to it without CAP_NET_ADMIN.
		tap := ipIn(podNS, "-d", "link", "show", "tap0")
		Expect(tap).To(MatchRegexp(`\buser 107\b`), "tap0's owner")
		AddReportEntry("cluster-virt-handler-podnet-uids", expectNonRootLaunch(namespace(), name)+"; tap0: "+strings.Join(strings.Fields(tap), " "))
		Expect(ipIn(podNS, "-4", "-o", "addr", "show", "dev", "k6t-eth0")).To(ContainSubstring(" 10.0.2.1/24 "), "the masquerade gateway")
		// Read as virt-handler wrote them: its container's nft (the launcher
		// image's), in the pod's namespace (compute lacks CAP_NET_ADMIN).
		rules, err := inNode(ctx, s, "podman", "exec", clusterlite.HandlerContainer(vhNode),
			"nsenter", "--net=/proc/"+strconv.Itoa(compute.NodePID)+"/ns/net", "nft", "list", "table", "ip", "nat")
		Expect(err).NotTo(HaveOccurred(), "nft in the pod's namespace, from virt-handler's container: %s", rules)
		for _, want := range []string{"chain KUBEVIRT_PREINBOUND", "chain KUBEVIRT_POSTINBOUND", "ip saddr 10.0.2.2 counter", "masquerade",
			`iifname "eth0" counter`, "dnat to 10.0.2.2", "snat to 10.0.2.1"} {
			Expect(rules).To(ContainSubstring(want), "virt-handler's masquerade rules in the pod's table ip nat")
		}

		By("QEMU's NIC is on the tap device (libvirt's ethernet interface, managed='no')")
		qemu := qemuOf(ctx, s, pod, namespace()+"_"+name)
		cmdline := strings.ReplaceAll(readCmdline(qemu.PID), "\x00", " ")
		Expect(cmdline).To(MatchRegexp(`-netdev (\{"type":"tap"|tap,)`), "QEMU's -netdev")
		Expect(cmdline).To(ContainSubstring("ua-default"), "the NIC's alias")
		Expect(cmdline).NotTo(MatchRegexp(`-netdev (\{"type":"user"|user,)`), "no user-mode network beside the tap")

		By("the guest leased KubeVirt's masquerade address from the DHCP server our monitor started with KubeVirt's phase 2, and reaches the gateway")
		lease, ping := guestLease(s, pod)
		Expect(lease["ip"]).To(Equal(masqueradeVMIP), "the guest's address (KubeVirt's default VM network %s): %v", masqueradeCIDR, lease)
		Expect(lease["mask"]).To(Equal("24"), "the lease's prefix length")
		Expect(lease["router"]).To(Equal(masqueradeGateway), "the lease's router")
		Expect(lease["server"]).To(Equal(masqueradeGateway), "the DHCP server's address (k6t-eth0)")
		Expect(lease["dns"]).To(Equal(strings.Join(podNameservers(compute.PID), " ")), "the lease's DNS: the pod's resolv.conf, as KubeVirt's server reads it")
		Expect(ping).To(Equal("ok "+masqueradeGateway), "the guest's ping of its router")
		// One MAC throughout: the guest's NIC (our converter's), the domain's
		// interface (KubeVirt's phase 2) as virt-handler reports it.
		qemuMAC := regexp.MustCompile(`"mac":"([0-9a-f:]+)"|mac=([0-9a-f:]+)`).FindStringSubmatch(cmdline)
		Expect(qemuMAC).NotTo(BeNil(), "QEMU's NIC MAC in %s", cmdline)
		Expect(lease["mac"]).To(Equal(qemuMAC[1]+qemuMAC[2]), "the guest's eth0 is QEMU's NIC")
		got, err := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Status.Interfaces).NotTo(BeEmpty())
		Expect(got.Status.Interfaces[0].MAC).To(Equal(lease["mac"]), "the VMI's status.interfaces[0].mac (the domain's interface, from KubeVirt's phase 2)")

		By("deleting the VMI: the pod goes, and with it its veth; the address is free again")
		veth := podVeth(s, podIP)
		Expect(ipIn(s.netns, "-o", "link", "show", "master", nodeagent.DefaultPodBridge)).To(ContainSubstring(veth+"@"), "the pod's veth on the bridge")
		deleted := time.Now()
		Expect(kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		waitPodGone(ctx, kc, pod)
		podGone := time.Since(deleted)
		Eventually(podContainerStates).WithArguments(pod.UID).WithTimeout(time.Minute).Should(BeEmpty())
		Eventually(func() string {
			return ipIn(s.netns, "-o", "link")
		}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).ShouldNot(ContainSubstring(veth+"@"), "the pod's veth in the stack's namespace")
		Expect(ipIn(s.netns, "-o", "link", "show", "master", nodeagent.DefaultPodBridge)).NotTo(ContainSubstring("clpv"), "no pod's veth left on the bridge")
		Expect(s.stateDir).NotTo(BeEmpty())
		AddReportEntry("cluster-virt-handler-podnet", fmt.Sprintf("pod network: VMI created → pod bound %v → VMI Running %v (created → Running %v), status by virt-handler; pod IP %s on eth0, tap0, k6t-eth0 and virt-handler's masquerade rules in the pod; the guest leased %s/%s via %s (dns %s, mac %s), ping of the router %s; pod and veth gone %v after the VMI's deletion",
			bound.Sub(created).Round(100*time.Millisecond), running.Sub(bound).Round(100*time.Millisecond), running.Sub(created).Round(100*time.Millisecond),
			podIP, lease["ip"], lease["mask"], lease["router"], lease["dns"], lease["mac"], ping, podGone.Round(100*time.Millisecond)))
	})
})

// KubeVirt v1.6.0's masquerade addresses for a pod network without
// vmNetworkCIDR: DefaultVMCIDR (pkg/virt-launcher/virtwrap/api/defaults.go),
// of which link.GenerateMasqueradeGatewayAndVmIPAddrs gives the gateway
// (k6t-eth0, the DHCP server) the first host address and the VM the second.
const (
	masqueradeCIDR    = "10.0.2.0/24"
	masqueradeGateway = "10.0.2.1"
	masqueradeVMIP    = "10.0.2.2"
)

// guestLease waits for the test guest's DHCP markers (harness.dhcp) on its
// console, in the pod's ephemeral-disks emptyDir where our monitor keeps
// the launch folders: the lease's fields and the router ping's result.
func guestLease(s *liteStack, pod *k8sv1.Pod) (map[string]string, string) {
	pattern := filepath.Join(s.stateDir, "nodens", "kubelet", "pods", string(pod.UID), "volumes", "*", "ephemeral-disks", "crashloop", "start-*", "console.log")
	var lease map[string]string
	var ping, console string
	Eventually(func() string {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			b, _ := os.ReadFile(f)
			console = string(b)
			for _, line := range strings.Split(console, "\n") {
				line = strings.TrimSpace(line)
				if rest, ok := strings.CutPrefix(line, "HARNESS-DHCP-LEASE "); ok {
					lease = markerFields(rest)
				}
				if rest, ok := strings.CutPrefix(line, "HARNESS-PING-GATEWAY "); ok {
					ping = rest
				}
				if strings.HasPrefix(line, "HARNESS-DHCP-FAILED") {
					return line
				}
			}
		}
		if lease == nil || ping == "" {
			return ""
		}
		return "leased"
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("leased"), func() string {
		return fmt.Sprintf("the guest's DHCP markers in %s; its console:\n%s", pattern, console)
	})
	return lease, ping
}

// markerFields are a marker's key=value fields; a value runs to the next
// key (dns may hold several addresses).
func markerFields(s string) map[string]string {
	out := map[string]string{}
	key := ""
	for _, w := range strings.Fields(s) {
		if k, v, ok := strings.Cut(w, "="); ok {
			key, out[k] = k, v
			continue
		}
		if key != "" {
			out[key] = strings.TrimSpace(out[key] + " " + w)
		}
	}
	return out
}

// podNameservers are the IPv4 nameservers of the pod's resolv.conf (compute's,
// by host PID), or 8.8.8.8 without any: what KubeVirt's DHCP server hands
// the guest (pkg/network/dns, ParseNameservers).
func podNameservers(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/resolv.conf", pid))
	Expect(err).NotTo(HaveOccurred(), "the pod's resolv.conf")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, a.String())
			}
		}
	}
	if len(out) == 0 {
		out = []string{"8.8.8.8"}
	}
	return out
}

// computeName is the compute container's podman name (kubelet's form).
func computeName(pod *k8sv1.Pod) string {
	return fmt.Sprintf("k8s_compute_%s_%s_%s_0", pod.Name, pod.Namespace, pod.UID)
}

// computeProcess is the main process of the pod's compute container, by
// the host's PID.
func computeProcess(ctx context.Context, s *liteStack, pod *k8sv1.Pod) clusterlite.NodeProcess {
	pid1, err := clusterlite.ReadNodePID1(s.stateDir)
	Expect(err).NotTo(HaveOccurred())
	p, err := clusterlite.ContainerPID(ctx, pid1, computeName(pod))
	Expect(err).NotTo(HaveOccurred())
	return p
}

// inNode runs argv inside the stack's node namespace (its podman).
func inNode(ctx context.Context, s *liteStack, argv ...string) (string, error) {
	pid1, err := clusterlite.ReadNodePID1(s.stateDir)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid1), "-p", "-m", "-n", "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

// ipIn runs the host's ip in the network namespace file ns (never the
// host's own: read-only listings only).
func ipIn(ns string, args ...string) string {
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "ip"}, args...)...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "ip %v in %s: %s", args, ns, out)
	return string(out)
}

func mustReadlink(path string) string {
	l, err := os.Readlink(path)
	Expect(err).NotTo(HaveOccurred())
	return l
}

// podVeth is the host-side veth of the pod with address a, as the node
// agent names it (its offset in the pod subnet after "clpv"), checked
// against the bridge's ports.
func podVeth(s *liteStack, a netip.Addr) string {
	b, base := a.As4(), nodeagent.DefaultPodSubnet.Addr().As4()
	name := "clpv" + strconv.Itoa(int(b[3])-int(base[3]))
	Expect(ipIn(s.netns, "-o", "link")).To(ContainSubstring(name+"@"), "the pod's veth %s in the stack's namespace", name)
	return name
}
