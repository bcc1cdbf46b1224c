package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/cluster"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/memcg"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// launcherImage is the image cluster-lite's virt-controller names in
// every launcher pod (clusterlite up --launcher-image):
// $CLUSTER_LANE_LAUNCHER_IMAGE, else what `make image` builds.
var launcherImage = envOr("CLUSTER_LANE_LAUNCHER_IMAGE", "localhost/crashloop/virt-launcher:latest")

// liteNode is the node name cluster-lite registers (its default).
const liteNode = "clusterlite-node"

// laneRuntime is the --launcher-runtime the lane gives cluster-lite:
// CLUSTER_LANE_LAUNCHER_RUNTIME if set; otherwise podman when podman has
// the launcher image (make functest builds it), so that a broken runtime
// fails the lane instead of falling back; otherwise auto, and the
// container specs say why they are skipped.
func laneRuntime() string {
	if r := os.Getenv("CLUSTER_LANE_LAUNCHER_RUNTIME"); r != "" {
		return r
	}
	if conf := built.Path("containers", "storage.conf"); os.Getenv("CONTAINERS_STORAGE_CONF") == "" {
		// make image keeps the image in an overlay store of its own when
		// the user's store is not overlay, and names it in this file.
		if _, err := os.Stat(conf); err == nil {
			Expect(os.Setenv("CONTAINERS_STORAGE_CONF", conf)).To(Succeed())
		}
	}
	if _, err := podman("image", "exists", launcherImage); err == nil {
		return "podman"
	}
	return "auto"
}

// liteArgs are the lane's extra "clusterlite up" flags.
func liteArgs() []string { return []string{"--launcher-runtime", laneRuntime()} }

func podman(args ...string) (string, error) {
	out, err := exec.Command("podman", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// nodeContainers lists the containers cluster-lite's node agent made (all
// of them, running or not), by the node label it puts on each.
func nodeContainers() []string {
	out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelNode+"="+liteNode, "--format", "{{.Names}}")
	Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
	return strings.Fields(out)
}

// checkNoContainers fails when the node agent left a container behind
// (called after tear-down).
func checkNoContainers() {
	if _, err := exec.LookPath("podman"); err != nil {
		return
	}
	Expect(nodeContainers()).To(BeEmpty(), "containers of node %s left after tear-down", liteNode)
}

// danglingVolumes lists podman's volumes that no container uses, or nil
// where there is no podman.
func danglingVolumes() map[string]bool {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil
	}
	out, err := podman("volume", "ls", "--filter", "dangling=true", "--format", "{{.Name}}")
	Expect(err).NotTo(HaveOccurred(), "podman volume ls: %s", out)
	names := map[string]bool{}
	for _, n := range strings.Fields(out) {
		names[n] = true
	}
	return names
}

// checkNoVolumes fails if a volume no container uses appeared while the
// stack ran. The launcher image declares a VOLUME, so podman gives every
// container of it an anonymous volume, which a removal without --volumes
// keeps: about 240 of them per `make test` until the machine's lock pool
// (num_locks, 2048) ran out and pod starts were refused. Another suite's
// `--rm` container can be between its removal and its volume's, so the
// check waits a little for such a volume to go.
func (s *liteStack) checkNoVolumes() {
	if s.volumesBefore == nil {
		return
	}
	left := func() []string {
		var names []string
		for n := range danglingVolumes() {
			if !s.volumesBefore[n] {
				names = append(names, n)
			}
		}
		return names
	}
	Eventually(left).WithTimeout(15*time.Second).WithPolling(500*time.Millisecond).Should(BeEmpty(),
		"podman volumes no container uses, new since the stack started (a container removed without its anonymous volumes)")
}

// inspected is what the specs read from `podman inspect`.
type inspected struct {
	Name      string
	ImageName string
	// Path is the container's entry point, Args its arguments.
	Path   string
	Args   []string
	Config struct{ Labels map[string]string }
	State  struct {
		Status     string
		Pid        int
		CgroupPath string
	}
	HostConfig struct{ Memory int64 }
}

// containersOfPod lists the containers labelled with a pod's UID and
// inspects them. A container removed between the listing and its
// inspection (the node agent removes a pod's container as the pod goes,
// which the deletion specs poll for) is gone, not an error.
func containersOfPod(uid types.UID) []inspected {
	out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelPodUID+"="+string(uid), "--format", "{{.ID}}")
	Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
	var cs []inspected
	for _, id := range strings.Fields(out) {
		out, err = podman("container", "inspect", id)
		if err != nil && strings.Contains(out, "no such container") {
			continue
		}
		Expect(err).NotTo(HaveOccurred(), "podman inspect %s: %s", id, out)
		var one []inspected
		Expect(json.Unmarshal([]byte(out), &one)).To(Succeed())
		cs = append(cs, one...)
	}
	return cs
}

// memoryCgroup is the container's memory cgroup folder (v1 hierarchy when
// mounted, else unified).
func memoryCgroup(path string) string {
	if fi, err := os.Stat("/sys/fs/cgroup/memory"); err == nil && fi.IsDir() {
		return filepath.Join("/sys/fs/cgroup/memory", path)
	}
	return filepath.Join("/sys/fs/cgroup", path)
}

// cgroupMemoryLimit reads the limit the kernel enforces on the cgroup.
func cgroupMemoryLimit(path string) int64 {
	dir := memoryCgroup(path)
	file := filepath.Join(dir, "memory.limit_in_bytes")
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(dir, "memory.max")
	}
	data, err := os.ReadFile(file)
	Expect(err).NotTo(HaveOccurred(), "the container's memory limit")
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	Expect(err).NotTo(HaveOccurred(), "%s: %s", file, data)
	return n
}

// launcherPodOf is the live virt-launcher pod of a VMI (nil if none yet).
func launcherPodOf(ctx context.Context, vmi *v1.VirtualMachineInstance) *k8sv1.Pod {
	pods, err := client.CoreV1().Pods(vmi.Namespace).List(ctx, metav1.ListOptions{LabelSelector: v1.CreatedByLabel + "=" + string(vmi.UID)})
	Expect(err).NotTo(HaveOccurred())
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	return nil
}

func computeOf(pod *k8sv1.Pod) (spec k8sv1.Container, status *k8sv1.ContainerStatus) {
	for _, c := range pod.Spec.Containers {
		if c.Name == "compute" {
			spec = c
		}
	}
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == "compute" {
			status = &pod.Status.ContainerStatuses[i]
		}
	}
	return spec, status
}

// podsVM is a test-guest VM for the container specs: its memory limit set
// the way a user writes it (resources.limits.memory; KubeVirt adds its
// overhead to the pod's limit).
func podsVM(name string, guest, limit string, kernelArgs string) *v1.VirtualMachine {
	vm := testguest.VM(name, v1.RunStrategyAlways, nil, kernelArgs)
	vm.Namespace = namespace()
	spec := &vm.Spec.Template.Spec
	g := resource.MustParse(guest)
	spec.Domain.Memory.Guest = &g
	spec.Domain.Resources.Limits = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse(limit)}
	return vm
}

var _ = Describe("launcher pods as containers", Label("containers"), func() {
	BeforeEach(func() {
		if lite == nil {
			Skip("KUBECONFIG points at another cluster: its kubelet runs the pods")
		}
		if r := laneRuntime(); r != "podman" {
			Skip("the lane runs cluster-lite with --launcher-runtime=" + r + " (podman without " + launcherImage +
				", see make image, or CLUSTER_LANE_LAUNCHER_RUNTIME): no containers to check")
		}
	})

	It("runs each launcher pod as a podman container of the pod's image, labelled with its UID, with the pod's memory limit in its cgroup, and removes it with the pod", func(ctx SpecContext) {
		name := fmt.Sprintf("pods-run-%d", time.Now().Unix()%100000)
		createOnCluster(ctx, podsVM(name, "256Mi", "256Mi", ""))
		var vmi *v1.VirtualMachineInstance
		Eventually(func() v1.VirtualMachineInstancePhase {
			var err error
			if vmi, err = client.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return ""
			}
			return vmi.Status.Phase
		}).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal(v1.Running), "VMI %s", name)
		pod := launcherPodOf(ctx, vmi)
		Expect(pod).NotTo(BeNil(), "the launcher pod of %s", name)
		spec, _ := computeOf(pod)
		limit := spec.Resources.Limits.Memory().Value()
		Expect(limit).To(BeNumerically(">", 256<<20), "KubeVirt adds its overhead to the VMI's limit in the pod")

		By("the runtime has one running container for the pod, of the pod's image, with its memory limit")
		cs := containersOfPod(pod.UID)
		Expect(cs).To(HaveLen(1), "containers labelled %s=%s", nodeagent.LabelPodUID, pod.UID)
		c := cs[0]
		Expect(c.Name).To(Equal(nodeagent.ContainerName(pod.Namespace, pod.Name, string(pod.UID))))
		Expect(c.State.Status).To(Equal("running"))
		Expect(c.ImageName).To(Equal(spec.Image))
		Expect(c.Config.Labels).To(HaveKeyWithValue(nodeagent.LabelPodName, pod.Name))
		Expect(c.HostConfig.Memory).To(Equal(limit), "podman's memory limit is the compute container's")
		// The kernel keeps whole pages of KubeVirt's byte-exact limit.
		Expect(cgroupMemoryLimit(c.State.CgroupPath)).To(Equal(limit&^4095), "the kernel's limit on the container's memory cgroup")

		By("the VM's QEMU runs inside that container: in its PID namespace and its memory cgroup")
		pids := qemu.FindQEMU(namespace()+"_"+name, "")
		Expect(pids).To(HaveLen(1), "one QEMU of %s", name)
		ours, err := os.Readlink("/proc/self/ns/pid")
		Expect(err).NotTo(HaveOccurred())
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pids[0]))
		Expect(err).NotTo(HaveOccurred())
		Expect(theirs).NotTo(Equal(ours), "QEMU %d runs in the host's PID namespace", pids[0])
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids[0]))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(cg)).To(ContainSubstring(c.State.CgroupPath), "QEMU's cgroups")

		By("every container of the node belongs to a live launcher pod")
		for _, n := range nodeContainers() {
			uid := strings.Split(n, "_")
			Expect(uid).To(HaveLen(6), "container name %s", n)
			_, err := client.CoreV1().Pods(uid[3]).Get(ctx, uid[2], metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), "container %s has no pod", n)
		}

		By("deleting the VM removes the pod and its container")
		Expect(client.VirtualMachine(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() []inspected { return containersOfPod(pod.UID) }).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).
			Should(BeEmpty(), "container of pod %s", pod.Name)
		Eventually(func() bool {
			_, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(time.Minute).Should(BeTrue(), "pod %s", pod.Name)
	})

	It("has the kernel OOM-kill QEMU when the guest touches more memory than the pod's limit; the VMI fails with its compute container OOMKilled, not counted as a start failure as it failed after Running", Label("oom"), func(ctx SpecContext) {
		// A user can write it: KubeVirt v1.6.0 accepts memory.guest above
		// resources.limits.memory under its default VM rollout strategy
		// (LiveUpdate; vmi-create-admitter.go validateGuestMemoryLimit),
		// requests default to the limit, and the pod's limit is the VMI's
		// limit plus KubeVirt's overhead estimate (renderresources.go,
		// WithMemoryOverhead): 64Mi + about 270Mi. The test guest boots in
		// about 230 MB; memtest=1 (the Debian kernel's early memory test)
		// writes all 512Mi of guest RAM, which QEMU then holds.
		name := fmt.Sprintf("pods-oom-%d", time.Now().Unix()%100000)
		// Every phase of every VMI of the VM, from a watch opened before
		// the VM exists: a VMI that is Failed only for a moment before the
		// VM replaces it is still seen.
		phases := watchVMIPhases(ctx, name)
		createOnCluster(ctx, podsVM(name, "512Mi", "64Mi", testguest.KernelArgs+" memtest=1"))

		By("following the first VMI's launcher container and its memory cgroup's oom_kill counter")
		var first *v1.VirtualMachineInstance
		var pod *k8sv1.Pod
		Eventually(func() *k8sv1.Pod {
			vmi, err := client.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil
			}
			first, pod = vmi, launcherPodOf(ctx, vmi)
			return pod
		}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).ShouldNot(BeNil())
		spec, _ := computeOf(pod)
		limit := spec.Resources.Limits.Memory().Value()
		var c inspected
		Eventually(func() []inspected {
			cs := containersOfPod(pod.UID)
			if len(cs) == 1 {
				c = cs[0]
			}
			return cs
		}).WithTimeout(time.Minute).WithPolling(50 * time.Millisecond).Should(HaveLen(1))
		Expect(c.HostConfig.Memory).To(Equal(limit))
		kills := followOOMKills(ctx, c.State.CgroupPath)
		terminated := followComputeTermination(ctx, pod)
		fmt.Fprintf(GinkgoWriter, "pod %s: compute limit %s (%d bytes) for a 512Mi guest with limits.memory 64Mi\n", pod.Name, spec.Resources.Limits.Memory(), limit)

		By("the VMI reaches Running, then fails (seen on the watch)")
		running := phases.reached(first.UID, v1.Running)
		Eventually(running).WithTimeout(3*time.Minute).Should(BeClosed(), "VMI %s Running; phases seen: %s", name, phases)
		runningAt := time.Now()
		failed := phases.reached(first.UID, v1.Failed)
		Eventually(failed).WithTimeout(3*time.Minute).Should(BeClosed(), "VMI %s Failed; phases seen: %s", name, phases)
		vmi := phases.last(first.UID)
		fmt.Fprintf(GinkgoWriter, "VMI %s: Running to Failed in %v; phases seen: %s\n", first.UID, time.Since(runningAt).Round(time.Millisecond), phases)
		attempt := cluster.AttemptFrom(vmi)
		Expect(attempt.Running).To(BeTrue(), "the VMI was Running before the OOM kill: %+v", vmi.Status.PhaseTransitionTimestamps)

		By("the pod's compute container terminated OOMKilled, the kernel's kill counted in its cgroup")
		Eventually(terminated).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).ShouldNot(BeNil(), "the compute container's terminated state")
		t := terminated()
		fmt.Fprintf(GinkgoWriter, "compute container: exit %d, reason %s, message %q; cgroup oom_kill %d\n", t.ExitCode, t.Reason, t.Message, kills())
		Expect(t.Reason).To(Equal("OOMKilled"))
		Expect(t.ExitCode).NotTo(BeZero())
		Expect(kills()).To(BeNumerically(">=", 1), "the container's memory cgroup counted the kernel's OOM kill")

		By("failed after Running: no start failure is counted and the next VMI comes without a backoff")
		Eventually(func() types.UID {
			next, err := client.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return ""
			}
			return next.UID
		}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).ShouldNot(Equal(first.UID), "the VM starts a new VMI at once (KubeVirt's first backoff is 10-15 s)")
		vm, err := client.VirtualMachine(namespace()).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.StartFailure).To(BeNil(), "KubeVirt counts only failures before Running")
		AddReportEntry("cluster-oom", fmt.Sprintf("pod limit %d bytes; compute %s exit %d; cgroup oom_kill %d; VMI Running then Failed (%s); startFailure %v; VM %s",
			limit, t.Reason, t.ExitCode, kills(), phases, vm.Status.StartFailure, vm.Status.PrintableStatus))
	})
})

// vmiPhases is every phase a VM's VMIs passed through, as a watch saw
// them, by VMI UID, with when each was first seen and when the VMI was
// deleted.
type vmiPhases struct {
	mu      sync.Mutex
	order   []types.UID
	seen    map[types.UID][]phaseSeen
	objects map[types.UID]*v1.VirtualMachineInstance
	deleted map[types.UID]time.Time
	waits   map[phaseKey]chan struct{}
}

type phaseSeen struct {
	phase v1.VirtualMachineInstancePhase
	at    time.Time
}

type phaseKey struct {
	uid   types.UID
	phase v1.VirtualMachineInstancePhase
}

// watchVMIPhases watches the VMIs named name until ctx ends, re-opening a
// watch the server closes from the last resource version seen.
func watchVMIPhases(ctx context.Context, name string) *vmiPhases {
	p := &vmiPhases{seen: map[types.UID][]phaseSeen{}, objects: map[types.UID]*v1.VirtualMachineInstance{},
		deleted: map[types.UID]time.Time{}, waits: map[phaseKey]chan struct{}{}}
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	w, err := client.VirtualMachineInstance(namespace()).Watch(ctx, opts)
	Expect(err).NotTo(HaveOccurred(), "watching VMI %s", name)
	go func() {
		for {
			for ev := range w.ResultChan() {
				if vmi, ok := ev.Object.(*v1.VirtualMachineInstance); ok {
					p.record(ev.Type, vmi)
					opts.ResourceVersion = vmi.ResourceVersion
				}
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			if w, err = client.VirtualMachineInstance(namespace()).Watch(ctx, opts); err != nil {
				fmt.Fprintf(GinkgoWriter, "re-opening the watch of VMI %s: %v\n", name, err)
				return
			}
		}
	}()
	return p
}

func (p *vmiPhases) record(t watch.EventType, vmi *v1.VirtualMachineInstance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid := vmi.UID
	if _, ok := p.seen[uid]; !ok {
		p.order = append(p.order, uid)
		p.seen[uid] = nil
	}
	p.objects[uid] = vmi
	if t == watch.Deleted {
		p.deleted[uid] = time.Now()
	}
	ph := p.seen[uid]
	if vmi.Status.Phase != "" && (len(ph) == 0 || ph[len(ph)-1].phase != vmi.Status.Phase) {
		p.seen[uid] = append(ph, phaseSeen{phase: vmi.Status.Phase, at: time.Now()})
		if c, ok := p.waits[phaseKey{uid, vmi.Status.Phase}]; ok {
			close(c)
			delete(p.waits, phaseKey{uid, vmi.Status.Phase})
		}
	}
}

// reached returns a channel closed once the VMI uid has been seen in phase.
func (p *vmiPhases) reached(uid types.UID, phase v1.VirtualMachineInstancePhase) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := make(chan struct{})
	for _, s := range p.seen[uid] {
		if s.phase == phase {
			close(c)
			return c
		}
	}
	p.waits[phaseKey{uid, phase}] = c
	return c
}

// last is the latest object the watch gave for uid.
func (p *vmiPhases) last(uid types.UID) *v1.VirtualMachineInstance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.objects[uid]
}

// String lists each VMI's phases with the time since its first, and how
// long after its last phase it was deleted.
func (p *vmiPhases) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for i, uid := range p.order {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "VMI %d:", i+1)
		ph := p.seen[uid]
		for _, s := range ph {
			fmt.Fprintf(&b, " %s@%v", s.phase, s.at.Sub(ph[0].at).Round(time.Millisecond))
		}
		if d, ok := p.deleted[uid]; ok && len(ph) > 0 {
			fmt.Fprintf(&b, " deleted %v after %s", d.Sub(ph[len(ph)-1].at).Round(time.Millisecond), ph[len(ph)-1].phase)
		}
	}
	return b.String()
}

// followOOMKills follows the container's OOM-kill counter every 10 ms
// until it is gone (with its container) or ctx ends, and returns a
// function giving the highest count seen.
func followOOMKills(ctx context.Context, path string) func() int {
	f := memcg.Follow(ctx, memcg.CounterFile("", path), 10*time.Millisecond)
	return func() int { n, _ := f.Most(); return n }
}

// followComputeTermination watches a pod until ctx ends and returns a
// function giving the compute container's terminated state once the pod
// showed one (the pod may be deleted right after).
func followComputeTermination(ctx context.Context, pod *k8sv1.Pod) func() *k8sv1.ContainerStateTerminated {
	var mu sync.Mutex
	var last *k8sv1.ContainerStateTerminated
	w, err := client.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: pod.ResourceVersion})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*k8sv1.Pod)
			if !ok || p.UID != pod.UID {
				continue
			}
			if _, st := computeOf(p); st != nil && st.State.Terminated != nil {
				mu.Lock()
				last = st.State.Terminated.DeepCopy()
				mu.Unlock()
			}
		}
	}()
	return func() *k8sv1.ContainerStateTerminated {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}
