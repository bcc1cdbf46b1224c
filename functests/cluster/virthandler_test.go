package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/cluster"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

var _ = Describe("KubeVirt's own virt-handler on cluster-lite's node", Label("virt-handler"), Ordered, func() {
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) { s, kc = virtHandlerStack(ctx) })

	It("runs a test-guest VMI without a pod network to Running, with its status written by virt-handler, and tear-down leaves no container, namespace, mount, image or folder", func(ctx SpecContext) {
		var err error
		By("a VMI of the test guest with no pod network")
		name := fmt.Sprintf("vh-%d", time.Now().Unix()%100000)
		vmi := testguest.VMI(testguest.Spec{Name: name, Namespace: namespace()})
		noPodNet := false
		vmi.Spec.Domain.Devices.AutoattachPodInterface = &noPodNet
		created := time.Now()
		vmi, err = kc.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		vmi, pod, bound := waitVHRunning(ctx, kc, vmi, 4*time.Minute, func() string { return fmt.Sprintf("VMI %s; stack log %s", name, s.logPath) })
		running := time.Now()

		By("the launcher runs as KubeVirt's non-root user, 107, with no Root feature gate: the VMI's runtimeUser, the pod's securityContext, every process of compute")
		Expect(vmi.Status.RuntimeUser).To(BeEquivalentTo(107), "virt-controller marks the VMI non-root")
		Expect(pod.Spec.SecurityContext.RunAsUser).To(HaveValue(BeEquivalentTo(107)))
		Expect(pod.Spec.SecurityContext.FSGroup).To(HaveValue(BeEquivalentTo(107)))
		uids := expectNonRootLaunch(namespace(), name)
		AddReportEntry("cluster-virt-handler-uids", uids)

		By("the VMI's status is virt-handler's: its managedFields, and nothing of the node agent's")
		managers := managersOf(vmi.ManagedFields)
		Expect(managers).To(ContainElement("virt-handler"), "managedFields of VMI %s", name)
		Expect(managers).NotTo(ContainElement("clusterlite"), "the node agent writes nothing to VMIs in this mode")
		Expect(vmi.Status.NodeName).To(Equal(vhNode))
		Expect(vmi.Status.ActivePods).To(HaveKeyWithValue(pod.UID, vhNode))

		By("every container of the launcher pod runs, as containers of one pod; the init containers ran and are kept, as kubelet keeps them")
		states := podContainerStates(pod.UID)
		var names []string
		for name, state := range states {
			if slices.Contains(guestInits, name) {
				Expect(state).To(HavePrefix("Exited (0)"), "init container %s", name)
			} else {
				Expect(state).To(HavePrefix("Up"), "container %s", name)
			}
			names = append(names, name)
		}
		Expect(names).To(ConsistOf(append(append([]string{"POD", guestSidecar}, guestInits...), guestContainers...)))

		By("the pod's status is each container's own, from podman: init containers Completed, the sidecar and containers running and ready")
		pod, err = kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		statuses := expectRunningPodStatuses(pod)
		podDir := filepath.Join(s.stateDir, "nodens", "kubelet", "pods", string(pod.UID))
		_, err = os.Stat(filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "sockets", "launcher-sock"))
		Expect(err).NotTo(HaveOccurred(), "the launcher socket in the pod's sockets emptyDir at kubelet's path, where virt-handler found it")

		By("deleting the VMI: virt-handler stops the guest, the agent removes the pod, its containers and its folder")
		deleted := time.Now()
		Expect(kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		waitPodGone(ctx, kc, pod)
		podGone := time.Since(deleted)
		Eventually(podContainerStates).WithArguments(pod.UID).WithTimeout(time.Minute).Should(BeEmpty())
		Eventually(func() error { _, err := os.Stat(podDir); return err }).WithTimeout(30 * time.Second).Should(MatchError(os.ErrNotExist))
		AddReportEntry("cluster-virt-handler", fmt.Sprintf("VMI created → pod bound %v → VMI Running %v (created → Running %v) with KubeVirt's virt-handler writing its status; pod gone %v after the VMI's deletion; containers %s; pod status: %s",
			bound.Sub(created).Round(100*time.Millisecond), running.Sub(bound).Round(100*time.Millisecond), running.Sub(created).Round(100*time.Millisecond),
			podGone.Round(100*time.Millisecond), strings.Join(names, ", "), statuses))
	})

	It("reports a fail-fast pod's containers each in its own state from podman: compute terminated with exit 2 (Error), the init containers Completed", func(ctx SpecContext) {
		name := fmt.Sprintf("vh-ff-%d", time.Now().Unix()%100000)
		failed, vmi := watchFailedPod(ctx, kc, name)
		statuses := expectFailFastPodStatuses(failed)
		Expect(kc.VirtualMachineInstance(namespace()).Delete(ctx, vmi.Name, metav1.DeleteOptions{})).To(Succeed())
		waitPodGone(ctx, kc, failed)
		AddReportEntry("cluster-virt-handler-fail-fast-pod", "pod "+failed.Name+" Failed: "+statuses)
	})
	// The lane's crash-loop scenarios on KubeVirt's controller, here with
	// KubeVirt's virt-handler on the node: three fail-fast VMs loop at the
	// same time, so that the lane waits out KubeVirt's backoff once.
	Describe("KubeVirt's crash loops, three fail-fast VMs at once", Ordered, func() {
		const upTo = 3 // failure counts whose retry delay is checked
		var (
			// inLoop (Always) runs once its annotation goes while it waits
			// out failure 3; always and rerun are stopped in the loop and
			// started again, as in the lane's scenarios on its own stack.
			inLoop, always, rerun *kvLoop
			stoppedAt             time.Time
		)
		BeforeAll(func(ctx SpecContext) {
			follow, stopFollowing := context.WithCancel(context.Background())
			DeferCleanup(stopFollowing)
			suffix := fmt.Sprintf("%d", time.Now().Unix()%100000)
			inLoop = newKVLoop(follow, kc, "vh-crash-"+suffix, v1.RunStrategyAlways, true)
			always = newKVLoop(follow, kc, "vh-always-"+suffix, v1.RunStrategyAlways, true)
			rerun = newKVLoop(follow, kc, "vh-rerun-"+suffix, v1.RunStrategyRerunOnFailure, true)
			var vms []*v1.VirtualMachine
			for _, l := range []*kvLoop{inLoop, always, rerun} {
				vm := crashingVM(l.name, l.strategy, true)
				noPodNet := false // no pod network yet on this stack
				vm.Spec.Template.Spec.Domain.Devices.AutoattachPodInterface = &noPodNet
				vms = append(vms, vm)
			}
			createVMs(ctx, kc, vms...)
		})

		It("crash-loops all three through counts 1, 2, 3 in CrashLoopBackOff inside KubeVirt's envelope, their pods failing through the agent's compute status, and runs the one whose annotation goes while it waits out failure 3, status by virt-handler", func(ctx SpecContext) {
			loops := []*kvLoop{inLoop, always, rerun}
			By("the first launcher pod of each VM fails: compute's exit code in the status the agent reports as kubelet")
			var firsts []string
			for _, l := range loops {
				Eventually(func() int { return len(l.failedPods()) }).WithTimeout(2*time.Minute).WithPolling(100*time.Millisecond).
					Should(BeNumerically(">", 0), func() string {
						return fmt.Sprintf("a Failed launcher pod of %s, seen through a watch; the stack log %s on it:\n%s", l.name, s.logPath, linesWith(s.logPath, l.name, 40))
					})
				failed := l.failedPods()[0]
				var compute *k8sv1.ContainerStateTerminated
				for _, cs := range failed.Status.ContainerStatuses {
					if cs.Name == "compute" {
						compute = cs.State.Terminated
					}
				}
				Expect(compute).NotTo(BeNil(), "compute's status in pod %s: %+v", failed.Name, failed.Status.ContainerStatuses)
				Expect(compute.ExitCode).NotTo(BeZero(), "the fail-fast launcher's exit code in pod %s", failed.Name)
				expectFailFastPodStatuses(failed)
				firsts = append(firsts, fmt.Sprintf("%s compute exit %d (%s)", failed.Name, compute.ExitCode, compute.Reason))
			}

			By("waiting for the third failure of " + inLoop.name + " and CrashLoopBackOff")
			Eventually(func() string {
				_, as, vm := inLoop.snapshot()
				done := 0
				for _, a := range as {
					if !a.Finished.IsZero() {
						done++
					}
				}
				return fmt.Sprintf("%d finished attempts, status %s", done, statusOf(vm))
			}).WithTimeout(4*time.Minute).WithPolling(200*time.Millisecond).Should(Equal(fmt.Sprintf("%d finished attempts, status CrashLoopBackOff count %d", upTo, upTo)), "VM %s", inLoop.name)

			By("the annotation of " + inLoop.name + " removed while it waits out failure 3: the next attempt runs")
			patch, err := cluster.RemoveTemplateAnnotationPatch(failFast)
			Expect(err).NotTo(HaveOccurred())
			_, err = kc.VirtualMachine(namespace()).Patch(ctx, inLoop.name, types.JSONPatchType, patch, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() string {
				_, _, vm := inLoop.snapshot()
				return statusOf(vm)
			}).WithTimeout(4*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Running count 0"), "VM %s; stack log %s", inLoop.name, s.logPath)
			expectRunningByVirtHandler(ctx, kc, inLoop.name)

			By("waiting for the fourth attempt of the other two (the retry after failure 3)")
			Eventually(func() string {
				var missing []string
				for _, l := range []*kvLoop{always, rerun} {
					if n := l.attemptCount(); n < upTo+1 {
						missing = append(missing, fmt.Sprintf("%s: %d attempts", l.name, n))
					}
				}
				return strings.Join(missing, ", ")
			}).WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).Should(BeEmpty())

			var table strings.Builder
			var statuses []string
			for _, l := range loops {
				tr, t := checkKVLoop(l, fmt.Sprintf("KubeVirt %s %s, virt-handler", l.strategy, l.name), upTo, l != inLoop)
				table.WriteString(t)
				statuses = append(statuses, fmt.Sprintf("%s statuses by count %v / %v / %v; Failed pods seen Failed for %v before their deletion",
					l.name, tr.StatusesAt(1), tr.StatusesAt(2), tr.StatusesAt(3), l.failedWindows()))
			}
			fmt.Fprint(GinkgoWriter, table.String())
			Expect(os.WriteFile(filepath.Join(artifacts, "gaps-virt-handler.txt"), []byte(table.String()), 0o644)).To(Succeed())
			AddReportEntry("cluster-virt-handler-crashloop", fmt.Sprintf("first Failed pods: %s\n%s\n%s",
				strings.Join(firsts, "; "), strings.Join(statuses, "\n"), table.String()))
		})

		It("stops Always and RerunOnFailure in the middle of the loop and clears the record; KubeVirt refuses to stop RerunOnFailure once its VMI is final", func(ctx SpecContext) {
			stoppedAt = time.Now()
			stopKVLoops(ctx, always, rerun)
			for _, l := range []*kvLoop{always, rerun} {
				Eventually(l.loopState).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Stopped startFailure=false"), "KubeVirt %s %s", l.strategy, l.name)
			}
		})

		It("recovers both to Running, status by virt-handler, with the record cleared once the fail-fast annotation is gone", func(ctx SpecContext) {
			startedAt := recoverKVLoops(ctx, always, rerun)
			for _, l := range []*kvLoop{always, rerun} {
				Eventually(l.loopState).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Running startFailure=false"), "KubeVirt %s %s; stack log %s", l.strategy, l.name, s.logPath)
				expectRunningByVirtHandler(ctx, kc, l.name)
			}
			By("no attempt was made between the stop and the start")
			for _, l := range []*kvLoop{always, rerun} {
				_, as, _ := l.snapshot()
				Expect(createdBetween(as, stoppedAt, startedAt)).To(BeZero(), "KubeVirt %s %s", l.strategy, l.name)
			}
		})
	})
})

// expectRunningByVirtHandler checks that the VMI of the VM name is Running
// with its status written by KubeVirt's virt-handler and nothing of the
// node agent's, and that its pod's compute container runs the launcher
// image in podman.
func expectRunningByVirtHandler(ctx context.Context, kc kubecli.KubevirtClient, name string) {
	vmi, err := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(vmi.Status.Phase).To(Equal(v1.Running), "VMI %s", name)
	managers := managersOf(vmi.ManagedFields)
	Expect(managers).To(ContainElement("virt-handler"), "managedFields of VMI %s", name)
	Expect(managers).NotTo(ContainElement("clusterlite"), "the node agent writes nothing to VMIs in this mode")
	Expect(vmi.Status.ActivePods).To(HaveLen(1), "active pods of VMI %s", name)
	for uid := range vmi.Status.ActivePods {
		// A listing only: the host's podman inspecting a container of the
		// node namespace warns about what it cannot see from here.
		out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelPodUID+"="+string(uid),
			"--filter", "label="+nodeagent.LabelContainerName+"=compute", "--format", "{{.Image}} {{.State}}")
		Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
		Expect(out).To(HavePrefix(launcherImage+" Up"), "compute container of pod %s of VMI %s", uid, name)
		Expect(strings.Split(out, "\n")).To(HaveLen(1), "compute containers of pod %s of VMI %s", uid, name)
	}
}

var _ = Describe("a virt-handler stack killed with SIGKILL", Label("virt-handler"), func() {
	It("takes its node namespace's processes with it, and the next stack of the node removes the containers podman still lists", func() {
		skipWithoutVirtHandler()
		const node = "virt-handler-sigkill-node"
		listed := func() string {
			out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelNode+"="+node, "--format", "{{.Names}}")
			Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
			return out
		}
		before := tmpEntries()
		killed := runLite(liteBinDir(), "clusterlite-virt-handler-sigkill.log", "--node-side", "virt-handler", "--node-name", node)
		DeferCleanup(func() { _ = os.RemoveAll(killed.stateDir) }) // a killed stack cannot remove its folder
		Eventually(listed).WithTimeout(time.Minute).Should(ContainSubstring("virt-handler"), "virt-handler's container")
		Expect(killed.proc.Signal(syscall.SIGKILL)).To(Succeed())
		Eventually(killed.proc.Done()).WithTimeout(10 * time.Second).Should(BeClosed())
		Eventually(alive).WithArguments(killed.pids).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(BeEmpty(), "the node namespace's PID 1 and virt-handler's client outlive a SIGKILL of clusterlite up")
		stale := listed()
		Expect(stale).To(ContainSubstring("virt-handler"), "podman still lists the killed node's container, its PIDs those of a namespace that is gone")

		next := runLite(liteBinDir(), "clusterlite-virt-handler-after-sigkill.log", "--node-side", "virt-handler", "--node-name", node)
		next.tmpBefore = before
		next.tmpBefore[filepath.Base(killed.stateDir)] = true
		Expect(tail(next.logPath, 100000)).To(ContainSubstring("removing containers a killed node namespace left"))
		next.stop()
		Expect(listed()).To(BeEmpty(), "containers of node %s after the second stack's tear-down", node)
		AddReportEntry("cluster-virt-handler-sigkill", "after a SIGKILL, podman listed "+strings.Join(strings.Fields(stale), ", ")+"; the next stack of the node removed it from a fresh PID namespace")
	})
})

var _ = Describe("the node agent's field manager", Label("virt-handler"), func() {
	It("is among a VMI's managedFields when the agent plays virt-handler (the control for the virt-handler spec's check that it is not)", func(ctx SpecContext) {
		skipWithoutVirtHandler() // a control for those specs, run with them
		name := fmt.Sprintf("vh-control-%d", time.Now().Unix()%100000)
		vmi := testguest.VMI(testguest.Spec{Name: name, Namespace: namespace()})
		_, err := client.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
			Eventually(func() bool {
				_, err := client.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "VMI %s deleted", name)
		})
		Eventually(func() v1.VirtualMachineInstancePhase {
			if vmi, err = client.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return ""
			}
			return vmi.Status.Phase
		}).WithTimeout(4*time.Minute).WithPolling(200*time.Millisecond).Should(Equal(v1.Running), "VMI %s on the lane's stack", name)
		Expect(managersOf(vmi.ManagedFields)).To(ContainElement("clusterlite"), "the lane's node agent wrote the VMI's phase")
	})
})

// statusOf is a VM's printable status and start-failure count.
func statusOf(vm *v1.VirtualMachine) string {
	if vm == nil {
		return "no VM seen"
	}
	count := 0
	if vm.Status.StartFailure != nil {
		count = vm.Status.StartFailure.ConsecutiveFailCount
	}
	return fmt.Sprintf("%s count %d", vm.Status.PrintableStatus, count)
}

// waitPodGone waits up to 2 minutes until pod is deleted.
func waitPodGone(ctx SpecContext, kc kubecli.KubevirtClient, pod *k8sv1.Pod) {
	Eventually(func() bool {
		_, err := kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "pod %s", pod.Name)
}

// skipWithoutVirtHandler skips the virt-handler specs where they cannot
// run: no cluster-lite or podman of the lane's, or KubeVirt's virt-handler
// not built (make test does not build it).
func skipWithoutVirtHandler() {
	if why := virtHandlerUnavailable(); why != "" {
		Skip(why)
	}
}

// virtHandlerUnavailable says why the virt-handler stack cannot run here
// (skipWithoutVirtHandler's reasons), or "" when it can.
func virtHandlerUnavailable() string {
	if why := podmanLiteUnavailable("virt-handler"); why != "" {
		return why
	}
	for _, b := range []string{"virt-handler", "virt-chroot"} {
		if _, err := os.Stat(filepath.Join(liteBinDir(), b)); err != nil {
			return fmt.Sprintf("KubeVirt's %s is not built in %s: run `make clusterlite VIRT_HANDLER=1`", b, liteBinDir())
		}
	}
	return ""
}

// skipWithoutPodmanLite skips a spec that checks what (a node side on a
// cluster-lite of its own, its pods podman containers) where the lane has
// no cluster-lite or podman lacks the launcher image.
func skipWithoutPodmanLite(what string) {
	if why := podmanLiteUnavailable(what); why != "" {
		Skip(why)
	}
}

// podmanLiteUnavailable is skipWithoutPodmanLite's reason, or "".
func podmanLiteUnavailable(what string) string {
	if lite == nil {
		return "KUBECONFIG points at another cluster: " + what + " is checked on a cluster-lite of its own"
	}
	if r := laneRuntime(); r != "podman" {
		return what + " runs launcher pods as podman containers of " + launcherImage + ", which podman lacks here (make image)"
	}
	return ""
}

// podContainerStates is the state of every container of the pod by its
// container name, as the host's podman lists them.
func podContainerStates(uid types.UID) map[string]string { return podContainerList(uid, "{{.State}}") }

// podContainerList is one field (a podman ps template) of every container
// of the pod by its container name, as the host's podman lists them (a
// listing only: the host's podman never drives containers made inside the
// node namespace).
func podContainerList(uid types.UID, field string) map[string]string {
	out, err := podman("ps", "--all", "--no-trunc", "--filter", "label="+nodeagent.LabelPodUID+"="+string(uid),
		"--format", `{{index .Labels "`+nodeagent.LabelContainerName+`"}} `+field)
	Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
	values := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			values[name] = value
		}
	}
	return values
}

// linesWith is the last n lines of the file at path that contain what,
// for a failure message that shows CI's reader what the stack did.
func linesWith(path, what string, n int) string {
	data, _ := os.ReadFile(path)
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, what) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// managersOf lists the field managers of an object's managedFields.
func managersOf(fields []metav1.ManagedFieldsEntry) []string {
	var m []string
	for _, f := range fields {
		m = append(m, f.Manager)
	}
	return m
}
