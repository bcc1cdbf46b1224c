package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// The first row of #21 that only KubeVirt's own virt-handler makes
// honest: virt-handler SIGKILLed by PID and restarted by the stack's
// supervisor (as kubelet restarts a DaemonSet pod's container) while a VMI
// runs. kubevirt/kubevirt#18763 and #18765 are a restarted virt-handler
// with an empty domain cache failing a Running VMI; this spec shows what
// this release does in the plain case (the launcher's socket answers, no
// migration). The same while a VMI starts is virthandler_start_test.go.
var _ = Describe("KubeVirt's virt-handler killed with SIGKILL and restarted", Label("virt-handler"), Ordered, func() {
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) { s, kc = virtHandlerStack(ctx) })

	It("leaves a Running VMI Running throughout: the same QEMU process, the same VMI and launcher pod, no new ones (H1)", func(ctx SpecContext) {
		name := fmt.Sprintf("vh-restart-%d", time.Now().Unix()%100000)
		w := watchVMI(kc, name)
		vmi := createNoNetVMI(ctx, kc, name)
		DeferCleanup(keepRestartLogs, s, name)
		running := w.await(v1.Running, 4*time.Minute, s)
		pod := w.onlyPod()
		qemu := qemuOf(ctx, s, pod, name)
		fmt.Fprintf(GinkgoWriter, "VMI %s Running %v after creation; its QEMU host PID %d\n", name, running.Sub(w.began).Round(100*time.Millisecond), qemu.PID)

		r := awaitHandler(ctx, s, kc, killHandler(ctx, s))
		synced := handlerSynced(s, r, vmi.UID)
		Consistently(func() string { return w.latestPhase() + fmt.Sprintf(" QEMU alive %v", qemu.Alive()) }).
			WithTimeout(5*time.Second).WithPolling(100*time.Millisecond).Should(Equal("Running QEMU alive true"), "after the restarted virt-handler synced VMI %s", name)

		By("the watch saw the VMI Running from its first Running to now, one VMI and one pod, and QEMU is the one from before")
		Expect(w.phasesSince(running)).To(HaveEach(string(v1.Running)), "VMI phases seen since Running; stack log %s", s.logPath)
		Expect(w.vmiUIDs()).To(ConsistOf(vmi.UID), "VMIs named %s seen", name)
		Expect(w.podUIDs()).To(ConsistOf(pod.UID), "launcher pods of %s seen", name)
		Expect(w.deleted()).To(BeEmpty(), "nothing of %s deleted", name)
		after := qemuOf(ctx, s, pod, name)
		Expect(after).To(Equal(qemu), "the QEMU of pod %s (host PID and start time) after the restart", pod.Name)
		got, err := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(got.UID).To(Equal(vmi.UID))
		Expect(got.Status.Phase).To(Equal(v1.Running))
		Expect(got.Status.ActivePods).To(HaveKeyWithValue(pod.UID, s.node))

		row := fidelityRow("H1")
		AddReportEntry("cluster-virt-handler-restart-running", fmt.Sprintf("%s, KubeVirt %s: virt-handler %d SIGKILLed, %v later a new one (%d), its heartbeat %v after the kill; it synced the Running VMI %v after the kill (%q); VMI %s stayed Running (%d watch events, phases %v), QEMU host PID %d unchanged, one VMI, one pod. Rule: %s",
			row.ID, kubevirtVersion(ctx), r.old.PID, r.back.Sub(r.killed).Round(100*time.Millisecond), r.now.PID, r.heartbeat.Sub(r.killed).Round(time.Second),
			synced.at.Sub(r.killed).Round(100*time.Millisecond), synced.line, name, w.count(), w.phasesSince(running), qemu.PID, row.Upstream))
	})
})

// createNoNetVMI creates a test-guest VMI without a pod network on the
// virt-handler stack, deleted (and its pod waited for) after the spec.
func createNoNetVMI(ctx SpecContext, kc kubecli.KubevirtClient, name string) *v1.VirtualMachineInstance {
	return createNoNetVMIWith(ctx, kc, name, nil)
}

// createNoNetVMIWith is createNoNetVMI with annotations (faults) on the VMI.
func createNoNetVMIWith(ctx SpecContext, kc kubecli.KubevirtClient, name string, annotations map[string]string) *v1.VirtualMachineInstance {
	vmi := testguest.VMI(testguest.Spec{Name: name, Namespace: namespace(), Annotations: annotations})
	noPodNet := false
	vmi.Spec.Domain.Devices.AutoattachPodInterface = &noPodNet
	vmi, err := kc.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		Expect(kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() bool {
			_, err := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "VMI %s deleted", name)
		Eventually(func() int {
			pods, err := kc.CoreV1().Pods(namespace()).List(ctx, metav1.ListOptions{LabelSelector: v1.CreatedByLabel + "=" + string(vmi.UID)})
			if err != nil {
				return -1
			}
			return len(pods.Items)
		}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeZero(), "launcher pods of VMI %s gone", name)
	})
	return vmi
}

// keepRestartLogs copies virt-handler's log (every run of it: the
// spec's evidence) into the artifacts as virt-handler-restart-<name>.log,
// and, when the spec failed, the pods' logs and launch folders (the node
// agent's, and those in the pods' emptyDirs) before tear-down removes them.
func keepRestartLogs(s *liteStack, name string) {
	if b, err := os.ReadFile(handlerLog(s)); err == nil {
		_ = os.WriteFile(filepath.Join(artifacts, "virt-handler-restart-"+name+".log"), b, 0o644)
	}
	if !CurrentSpecReport().Failed() {
		return
	}
	dir := filepath.Join(artifacts, "virt-handler-restart-"+name)
	keepPodLogs(s, dir)
	pods := filepath.Join(s.stateDir, "nodens", "kubelet", "pods")
	_ = filepath.WalkDir(pods, func(path string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || !(strings.HasSuffix(path, ".log") || strings.HasSuffix(path, ".jsonl")) {
			return nil
		}
		rel, _ := filepath.Rel(pods, path)
		if data, err := os.ReadFile(path); err == nil && os.MkdirAll(filepath.Dir(filepath.Join(dir, "kubelet-pods", rel)), 0o755) == nil {
			_ = os.WriteFile(filepath.Join(dir, "kubelet-pods", rel), data, 0o644)
		}
		return nil
	})
}

// handlerRestart is one SIGKILL of virt-handler and its return.
type handlerRestart struct {
	// old is the killed process, now the restarted one (host PIDs).
	old, now clusterlite.NodeProcess
	// killed, back (the new process seen) and heartbeat (the node's
	// heartbeat annotation as the new virt-handler wrote it).
	killed, back, heartbeat time.Time
}

// handlerLog is virt-handler's log: every run of its container, appended.
func handlerLog(s *liteStack) string {
	return filepath.Join(s.stateDir, "control-plane", "logs", "virt-handler.log")
}

// handlerProcess is the host's process of virt-handler's container: podman
// inspect inside the node namespace (clusterlite up's node-pid1), its PID
// mapped to the host's.
func handlerProcess(ctx context.Context, s *liteStack) (clusterlite.NodeProcess, error) {
	pid1, err := clusterlite.ReadNodePID1(s.stateDir)
	if err != nil {
		return clusterlite.NodeProcess{}, err
	}
	return clusterlite.ContainerPID(ctx, pid1, clusterlite.HandlerContainer(s.node))
}

// killHandler SIGKILLs virt-handler by its PID (found through the node
// namespace, checked to run virt-handler) and waits until it is gone.
func killHandler(ctx SpecContext, s *liteStack) handlerRestart {
	old, err := handlerProcess(ctx, s)
	Expect(err).NotTo(HaveOccurred(), "virt-handler's process")
	Expect(old.Alive()).To(BeTrue())
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", old.PID))
	Expect(err).NotTo(HaveOccurred())
	Expect(filepath.Base(exe)).To(Equal("virt-handler"), "host PID %d, mapped from the container's, runs virt-handler (a check, not how it is found)", old.PID)
	r := handlerRestart{old: old}

	By(fmt.Sprintf("SIGKILL to virt-handler, host PID %d (node PID %d)", old.PID, old.NodePID))
	Expect(syscall.Kill(old.PID, syscall.SIGKILL)).To(Succeed())
	r.killed = time.Now()
	Eventually(old.Alive).WithTimeout(10*time.Second).WithPolling(20*time.Millisecond).Should(BeFalse(), "virt-handler %d after SIGKILL", old.PID)
	return r
}

// awaitHandler waits until the stack's supervisor has started a new
// virt-handler after r's kill and that one has written the node's
// heartbeat.
func awaitHandler(ctx SpecContext, s *liteStack, kc kubecli.KubevirtClient, r handlerRestart) handlerRestart {
	By("the stack's supervisor starts a new virt-handler, which writes the node's heartbeat")
	Eventually(func() string {
		p, err := handlerProcess(ctx, s)
		if err != nil {
			return err.Error()
		}
		if p == r.old {
			return "the killed process"
		}
		r.now = p
		return ""
	}).WithTimeout(90*time.Second).WithPolling(100*time.Millisecond).Should(BeEmpty(), "a new virt-handler; its log %s", handlerLog(s))
	r.back = time.Now()
	Eventually(func() string {
		node, err := kc.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		hb := node.Annotations[v1.VirtHandlerHeartbeat]
		t, err := time.Parse(time.RFC3339, hb)
		if err != nil {
			return fmt.Sprintf("heartbeat %q: %v", hb, err)
		}
		if t.Before(r.killed.Truncate(time.Second)) {
			return "heartbeat " + hb + " from before the kill"
		}
		r.heartbeat = t
		return ""
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(BeEmpty(), "the restarted virt-handler's heartbeat on node %s", s.node)
	Expect(r.now.Alive()).To(BeTrue(), "the restarted virt-handler %d still runs", r.now.PID)
	return r
}

// syncLine is the restarted virt-handler's first sync of a VMI, from its log.
type syncLine struct {
	at   time.Time
	line string
}

// handlerSynced waits until the restarted virt-handler's log has its
// "VMI is in phase" line for the VMI: it has looked at the VMI with what
// its domain cache holds, which is where #18763 fails a Running VMI. The
// new run's lines are those stamped after the kill (every run appends to
// one log; the killed one wrote nothing after it died).
func handlerSynced(s *liteStack, r handlerRestart, uid types.UID) syncLine {
	var got syncLine
	Eventually(func() bool {
		b, err := os.ReadFile(handlerLog(s))
		if err != nil {
			return false
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, string(uid)) || !strings.Contains(l, "VMI is in phase") {
				continue
			}
			if at, ok := stampOf(l); ok && at.After(r.killed) {
				got = syncLine{at: at, line: msgOf(l)}
				return true
			}
		}
		return false
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(BeTrue(), "the restarted virt-handler's sync of VMI %s in %s", uid, handlerLog(s))
	return got
}

// stampOf is the timestamp field of a virt-handler JSON log line.
func stampOf(line string) (time.Time, bool) {
	_, rest, ok := strings.Cut(line, `"timestamp":"`)
	if !ok {
		return time.Time{}, false
	}
	v, _, _ := strings.Cut(rest, `"`)
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// msgOf is the msg field of a virt-handler JSON log line, or the line.
func msgOf(line string) string {
	_, rest, ok := strings.Cut(line, `"msg":"`)
	if !ok {
		return line
	}
	msg, _, _ := strings.Cut(rest, `","`)
	return msg
}

// qemuCandidates lists the QEMU processes (host PIDs) below the main
// process of the pod's compute container, found by PID through the node
// namespace; none while the container or its domain is not up.
func qemuCandidates(ctx context.Context, s *liteStack, pod *k8sv1.Pod) []clusterlite.NodeProcess {
	out, err := podman("ps", "--filter", "label="+nodeagent.LabelPodUID+"="+string(pod.UID),
		"--filter", "label="+nodeagent.LabelContainerName+"=compute", "--format", "{{.Names}}")
	Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
	names := strings.Fields(out)
	if len(names) != 1 {
		return nil
	}
	pid1, err := clusterlite.ReadNodePID1(s.stateDir)
	Expect(err).NotTo(HaveOccurred())
	compute, err := clusterlite.ContainerPID(ctx, pid1, names[0])
	if err != nil {
		return nil
	}
	below, err := clusterlite.Descendants(compute.PID)
	Expect(err).NotTo(HaveOccurred())
	var qemu []clusterlite.NodeProcess
	for _, pid := range below {
		argv0, _, _ := strings.Cut(readCmdline(pid), "\x00")
		st, err := procfs.ReadStat(pid)
		if err != nil || !strings.Contains(filepath.Base(argv0), "qemu-system") {
			continue
		}
		qemu = append(qemu, clusterlite.NodeProcess{PID: pid, StartTicks: st.StartTicks})
	}
	return qemu
}

// qemuOf is the one QEMU process of the pod's compute container that runs
// the domain of VMI vmi (its command line names it; libvirt's capability
// probe, a QEMU with -machine none, does not).
func qemuOf(ctx context.Context, s *liteStack, pod *k8sv1.Pod, vmi string) clusterlite.NodeProcess {
	var qemu []clusterlite.NodeProcess
	Eventually(func() int {
		qemu = slices.DeleteFunc(qemuCandidates(ctx, s, pod), func(p clusterlite.NodeProcess) bool {
			return !strings.Contains(readCmdline(p.PID), vmi)
		})
		return len(qemu)
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Equal(1), "QEMU processes of pod %s's compute container running VMI %s", pod.Name, vmi)
	return qemu[0]
}

func readCmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(b)
}

// vmiWatch follows one VMI name and its launcher pods through watches, so
// that no phase and no object is missed.
type vmiWatch struct {
	name  string
	began time.Time
	mu    sync.Mutex
	seen  []seenEvent
	// changed is signalled after every event.
	changed chan struct{}
}

// seenEvent is one watch event of the VMI or of one of its pods.
type seenEvent struct {
	at    time.Time
	pod   bool
	typ   watch.EventType
	uid   types.UID
	name  string
	phase string
}

// watchVMI starts following name's VMI and launcher pods until the spec
// ends.
func watchVMI(kc kubecli.KubevirtClient, name string) *vmiWatch {
	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	w := &vmiWatch{name: name, began: time.Now(), changed: make(chan struct{}, 1)}
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	opens := []func(rv string) (watch.Interface, error){
		func(rv string) (watch.Interface, error) {
			o := byName
			o.ResourceVersion = rv
			return kc.VirtualMachineInstance(namespace()).Watch(ctx, o)
		},
		func(rv string) (watch.Interface, error) {
			return kc.CoreV1().Pods(namespace()).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		},
	}
	ready := make(chan struct{}, len(opens))
	for _, open := range opens {
		go w.follow(ctx, open, ready)
	}
	for range opens {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			Fail("the VMI and pod watches did not open within 30 s")
		}
	}
	return w
}

// follow reads one watch until ctx ends, re-opening it from the last
// resource version it saw when the server closes it.
func (w *vmiWatch) follow(ctx context.Context, open func(rv string) (watch.Interface, error), ready chan<- struct{}) {
	rv, first := "", true
	for ctx.Err() == nil {
		wi, err := open(rv)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if first {
			ready <- struct{}{}
			first = false
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // expired: list again
				break
			}
			if m, ok := ev.Object.(metav1.Object); ok {
				rv = m.GetResourceVersion()
			}
			w.record(ev)
		}
		wi.Stop()
	}
}

func (w *vmiWatch) record(ev watch.Event) {
	e := seenEvent{at: time.Now(), typ: ev.Type}
	switch o := ev.Object.(type) {
	case *v1.VirtualMachineInstance:
		e.uid, e.name, e.phase = o.UID, o.Name, string(o.Status.Phase)
	case *k8sv1.Pod:
		if !strings.HasPrefix(o.Name, "virt-launcher-"+w.name+"-") {
			return
		}
		e.pod, e.uid, e.name, e.phase = true, o.UID, o.Name, string(o.Status.Phase)
	default:
		return
	}
	w.mu.Lock()
	w.seen = append(w.seen, e)
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// await waits until the VMI is seen in phase and returns when; it fails
// at once on a final phase that is not the one asked for.
func (w *vmiWatch) await(phase v1.VirtualMachineInstancePhase, timeout time.Duration, s *liteStack) time.Time {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		for _, e := range w.seen {
			if !e.pod && e.phase == string(phase) {
				w.mu.Unlock()
				return e.at
			}
		}
		w.mu.Unlock()
		if p := w.latestPhase(); p != string(phase) && (p == string(v1.Failed) || p == string(v1.Succeeded)) {
			Fail(fmt.Sprintf("VMI %s is %s, waiting for %s; phases %v; stack log %s", w.name, p, phase, compact(w.phasesSince(w.began)), s.logPath))
		}
		select {
		case <-w.changed:
		case <-deadline:
			Fail(fmt.Sprintf("VMI %s not %s within %v; phases %v; stack log %s", w.name, phase, timeout, compact(w.phasesSince(w.began)), s.logPath))
		}
	}
}

// latestPhase is the VMI's phase in its last event ("deleted" after a
// DELETED event).
func (w *vmiWatch) latestPhase() string {
	return w.phaseAt(time.Now())
}

// phaseAt is the VMI's phase in its last event before t.
func (w *vmiWatch) phaseAt(t time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	phase := ""
	for _, e := range w.seen {
		if e.pod || e.at.After(t) {
			continue
		}
		phase = e.phase
		if e.typ == watch.Deleted {
			phase = "deleted"
		}
	}
	return phase
}

// phasesSince lists the VMI's phase in every event from t on.
func (w *vmiWatch) phasesSince(t time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var phases []string
	for _, e := range w.seen {
		if !e.pod && !e.at.Before(t) {
			phases = append(phases, e.phase)
		}
	}
	return phases
}

// count is the number of VMI events seen.
func (w *vmiWatch) count() int { return len(w.phasesSince(w.began)) }

func (w *vmiWatch) uids(pod bool) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var uids []types.UID
	for _, e := range w.seen {
		if e.pod == pod && !containsUID(uids, e.uid) {
			uids = append(uids, e.uid)
		}
	}
	return uids
}

func containsUID(uids []types.UID, u types.UID) bool {
	for _, x := range uids {
		if x == u {
			return true
		}
	}
	return false
}

// vmiUIDs and podUIDs are the distinct VMIs and launcher pods seen.
func (w *vmiWatch) vmiUIDs() []types.UID { return w.uids(false) }
func (w *vmiWatch) podUIDs() []types.UID { return w.uids(true) }

// deleted lists the VMIs and pods seen deleted.
func (w *vmiWatch) deleted() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d []string
	for _, e := range w.seen {
		if e.typ == watch.Deleted {
			d = append(d, e.name)
		}
	}
	return d
}

// onlyPod is the VMI's one launcher pod seen so far.
func (w *vmiWatch) onlyPod() *k8sv1.Pod {
	var pod *k8sv1.Pod
	Eventually(func() []types.UID { return w.podUIDs() }).WithTimeout(time.Minute).Should(HaveLen(1), "launcher pods of VMI %s", w.name)
	w.mu.Lock()
	for _, e := range w.seen {
		if e.pod {
			pod = &k8sv1.Pod{ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: namespace(), UID: e.uid}}
		}
	}
	w.mu.Unlock()
	return pod
}

// compact drops repeats in a row: Pending, Pending, Scheduling → Pending, Scheduling.
func compact(phases []string) []string {
	var out []string
	for _, p := range phases {
		if len(out) == 0 || out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	return out
}

// fidelityRow is the fidelity list's rule id, which the spec's report
// entry quotes beside what it measured.
func fidelityRow(id string) backoff.FidelityRule {
	for _, r := range backoff.FidelityRules() {
		if r.ID == id {
			return r
		}
	}
	Fail("no fidelity rule " + id + " in pkg/backoff")
	return backoff.FidelityRule{}
}
