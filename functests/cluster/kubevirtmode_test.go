package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// kvModeNode is the node of the KubeVirt-mode stack, so that its
// containers are told apart from the lane's.
const kvModeNode = "kubevirt-mode-node"

var _ = Describe("launcher pods in KubeVirt mode", Label("kubevirt-mode"), func() {
	It("runs a VMI to Running through the pod's own virt-launcher-monitor, driven over KubeVirt's gRPC protocol, with its QEMU inside the pod's container", func(ctx SpecContext) {
		skipWithoutPodmanLite("KubeVirt mode")
		driver := filepath.Join(built.BinDir(), "virt-handler-driver")
		_, err := os.Stat(driver)
		Expect(err).NotTo(HaveOccurred(), "the driver is missing: run `make kubevirtmode`")

		By("a second cluster-lite in KubeVirt mode, with a node of its own")
		before := tmpEntries()
		s := runLite(liteBinDir(), "clusterlite-kubevirt-mode.log", "--launcher-mode", "kubevirt", "--node-name", kvModeNode, "--driver", driver)
		s.tmpBefore = before
		DeferCleanup(func() {
			s.stop()
			out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelNode+"="+kvModeNode, "--format", "{{.Names}}")
			Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
			Expect(out).To(BeEmpty(), "containers of node %s left after tear-down", kvModeNode)
		})
		DeferCleanup(func() { keepPodLogs(s, filepath.Join(artifacts, "kubevirt-mode")) })
		kc, err := kubecli.GetKubevirtClientFromFlags("", s.kubeconfig)
		Expect(err).NotTo(HaveOccurred())

		name := fmt.Sprintf("kvmode-%d", time.Now().Unix()%100000)
		vm := testguest.VM(name, v1.RunStrategyAlways, nil, "")
		vm.Namespace = namespace()
		created := time.Now()
		_, err = kc.VirtualMachine(namespace()).Create(ctx, vm, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		var vmi *v1.VirtualMachineInstance
		Eventually(func() v1.VirtualMachineInstancePhase {
			if vmi, err = kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return ""
			}
			return vmi.Status.Phase
		}).WithTimeout(4*time.Minute).WithPolling(200*time.Millisecond).Should(Equal(v1.Running), "VMI %s; stack log %s", name, s.logPath)
		toRunning := time.Since(created)

		By("the pod's compute container runs the command line virt-controller rendered")
		pods, err := kc.CoreV1().Pods(namespace()).List(ctx, metav1.ListOptions{LabelSelector: v1.CreatedByLabel + "=" + string(vmi.UID)})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(1), "launcher pods of VMI %s", vmi.UID)
		pod := &pods.Items[0]
		spec, status := computeOf(pod)
		Expect(spec.Command).To(ContainElement("--qemu-timeout"), "compute command %q", spec.Command)
		Expect(spec.Command[0]).To(Equal("/usr/bin/virt-launcher-monitor"))
		Expect(status).NotTo(BeNil())
		Expect(status.State.Running).NotTo(BeNil(), "compute container state %+v", status.State)
		cs := containersOfPod(pod.UID)
		Expect(cs).To(HaveLen(1), "containers labelled %s=%s", nodeagent.LabelPodUID, pod.UID)
		c := cs[0]
		Expect(c.State.Status).To(Equal("running"))
		Expect(c.Path).To(Equal("/usr/bin/virt-launcher-monitor"), "the container's entry point")
		Expect(c.Args).To(Equal(append(append([]string(nil), spec.Command[1:]...), spec.Args...)), "the container's arguments are the pod's")

		By("the launcher socket is in the pod's sockets volume, where virt-handler finds it")
		podDir := filepath.Join(s.stateDir, "node", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
		_, err = os.Stat(filepath.Join(podDir, "volumes", "sockets", "launcher-sock"))
		Expect(err).NotTo(HaveOccurred(), "launcher-sock in the pod's sockets volume")
		events, err := os.ReadFile(launcherapi.Dir(podDir).Events())
		Expect(err).NotTo(HaveOccurred(), "the driver's event lines")
		Expect(string(events)).To(And(ContainSubstring(`"event":"Scheduled"`), ContainSubstring(`"event":"Running"`)))

		By("the VM's QEMU runs inside that container: its PID namespace and its cgroup")
		pids := qemu.FindQEMU(namespace()+"_"+name, "")
		Expect(pids).To(HaveLen(1), "one QEMU of %s", name)
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pids[0]))
		Expect(err).NotTo(HaveOccurred())
		containers, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.State.Pid))
		Expect(err).NotTo(HaveOccurred())
		Expect(theirs).To(Equal(containers), "QEMU %d is in the PID namespace of the container's PID 1 (%d)", pids[0], c.State.Pid)
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids[0]))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(cg)).To(ContainSubstring(c.State.CgroupPath), "QEMU's cgroups")

		AddReportEntry("cluster-kubevirt-mode-uids", expectNonRootLaunch(namespace(), name))

		By("deleting the VM stops the guest through the driver and removes the pod and its container")
		deleted := time.Now()
		Expect(kc.VirtualMachine(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		waitPodGone(ctx, kc, pod)
		Eventually(func() []inspected { return containersOfPod(pod.UID) }).WithTimeout(time.Minute).Should(BeEmpty())
		Eventually(func() []int { return qemu.FindQEMU(namespace()+"_"+name, "") }).WithTimeout(30 * time.Second).Should(BeEmpty())
		AddReportEntry("cluster-kubevirt-mode", fmt.Sprintf("VM created to VMI Running in %v through %s; pod gone %v after the VM's deletion; events: %s",
			toRunning.Round(100*time.Millisecond), strings.Join(spec.Command[:1], " "), time.Since(deleted).Round(100*time.Millisecond), eventNames(events)))
	})
})

// eventNames lists the event names of launcherapi event lines.
func eventNames(lines []byte) string {
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		if _, rest, ok := strings.Cut(l, `"event":"`); ok {
			name, _, _ := strings.Cut(rest, `"`)
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// keepPodLogs copies the node agent's pod folders' logs and event lines
// (the compute container's, the driver's, the launcher's and libvirt's)
// into dir when the spec failed, before tear-down removes them.
func keepPodLogs(s *liteStack, dir string) {
	if !CurrentSpecReport().Failed() {
		return
	}
	node := filepath.Join(s.stateDir, "node")
	_ = filepath.WalkDir(node, func(path string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || !(strings.HasSuffix(path, ".log") || strings.HasSuffix(path, ".jsonl") || strings.HasSuffix(path, ".json")) {
			return nil
		}
		rel, _ := filepath.Rel(node, path)
		data, err := os.ReadFile(path)
		if err == nil && os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755) == nil {
			_ = os.WriteFile(filepath.Join(dir, rel), data, 0o644)
		}
		return nil
	})
	fmt.Fprintf(GinkgoWriter, "the pods' logs are in %s\n", dir)
}
