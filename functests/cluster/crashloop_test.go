package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/cluster"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

const failFast = v1.FuncTestLauncherFailFastAnnotation

// crashingVM is a small VM whose launcher crashes at once (KubeVirt's own
// fail-fast annotation) under the given run strategy. On cluster-lite and
// for our controller it is the test guest every suite boots; on another
// cluster it uses a container disk (CLUSTER_LANE_IMAGE, cirros by default).
func crashingVM(name string, strategy v1.VirtualMachineRunStrategy, testGuest bool) *v1.VirtualMachine {
	if testGuest {
		vm := testguest.VM(name, strategy, map[string]string{failFast: ""}, "")
		vm.Namespace = namespace()
		return vm
	}
	grace := int64(10)
	return &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace()},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: &strategy,
			Template: &v1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{failFast: ""}},
				Spec: v1.VirtualMachineInstanceSpec{
					TerminationGracePeriodSeconds: &grace,
					Domain: v1.DomainSpec{
						Resources: v1.ResourceRequirements{Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("256Mi")}},
						Devices:   v1.Devices{Disks: []v1.Disk{{Name: "containerdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
					},
					Volumes: []v1.Volume{{Name: "containerdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{
						Image: envOr("CLUSTER_LANE_IMAGE", "quay.io/kubevirt/cirros-container-disk-demo:latest")}}}},
				},
			},
		},
	}
}

// kvLoop follows one VM on the cluster through watches, so that no
// status and no VMI is missed: a fail-fast VMI can be created, fail and be
// deleted within a few hundred milliseconds.
type kvLoop struct {
	name     string
	strategy v1.VirtualMachineRunStrategy
	// kc is the cluster's client; nil means the lane's.
	kc kubecli.KubevirtClient
	// pods, when set, follows the VM's launcher pods too, keeping each
	// one seen Failed: a fail-fast pod can be Failed for less than the
	// time between two polls before its VMI's deletion takes it.
	pods bool

	mu       sync.Mutex
	trace    cluster.Trace
	attempts map[types.UID]cluster.Attempt
	vm       *v1.VirtualMachine
	failed   []*k8sv1.Pod
	// failedFor is how long each Failed pod was seen before its deletion.
	failedFor map[types.UID]time.Duration
	failedAt  map[types.UID]time.Time
	// vmis is the latest copy of each VMI seen, for the phases a failed
	// attempt went through and who wrote them.
	vmis map[types.UID]*v1.VirtualMachineInstance
}

func (l *kvLoop) record(t watch.EventType, obj runtime.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch o := obj.(type) {
	case *v1.VirtualMachine:
		l.vm = o
		count := 0
		if o.Status.StartFailure != nil {
			count = o.Status.StartFailure.ConsecutiveFailCount
		}
		l.trace = l.trace.Add(cluster.Sample{At: time.Now(), Status: string(o.Status.PrintableStatus), Count: count})
	case *v1.VirtualMachineInstance:
		l.attempts[o.UID] = cluster.AttemptFrom(o)
		if l.vmis == nil {
			l.vmis = map[types.UID]*v1.VirtualMachineInstance{}
		}
		l.vmis[o.UID] = o
	case *k8sv1.Pod:
		if !strings.HasPrefix(o.Name, "virt-launcher-"+l.name+"-") || o.Status.Phase != k8sv1.PodFailed {
			return
		}
		if at, seen := l.failedAt[o.UID]; seen {
			if t == watch.Deleted {
				l.failedFor[o.UID] = time.Since(at)
			}
			return
		}
		if l.failedAt == nil {
			l.failedAt, l.failedFor = map[types.UID]time.Time{}, map[types.UID]time.Duration{}
		}
		l.failedAt[o.UID] = time.Now()
		l.failed = append(l.failed, o)
	}
}

// failedWindows is, for each Failed pod already deleted, how long it was
// seen Failed before, first seen first.
func (l *kvLoop) failedWindows() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, p := range l.failed {
		if d, ok := l.failedFor[p.UID]; ok {
			ds = append(ds, d.Round(time.Millisecond))
		}
	}
	return ds
}

// failedPods are the VM's launcher pods seen Failed, first seen first
// (only with pods set).
func (l *kvLoop) failedPods() []*k8sv1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*k8sv1.Pod(nil), l.failed...)
}

// follow watches the VM and its VMIs (and pods, if set) until ctx ends, re-opening a watch
// that the server closes.
func (l *kvLoop) follow(ctx context.Context) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", l.name).String()}
	kc := l.kc
	if kc == nil {
		kc = client
	}
	watchers := []func() (watch.Interface, error){
		func() (watch.Interface, error) { return kc.VirtualMachine(namespace()).Watch(ctx, opts) },
		func() (watch.Interface, error) { return kc.VirtualMachineInstance(namespace()).Watch(ctx, opts) },
	}
	if l.pods {
		watchers = append(watchers, func() (watch.Interface, error) {
			return kc.CoreV1().Pods(namespace()).Watch(ctx, metav1.ListOptions{})
		})
	}
	for _, open := range watchers {
		go func() {
			for ctx.Err() == nil {
				w, err := open()
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				for ev := range w.ResultChan() {
					if ev.Type != watch.Error {
						l.record(ev.Type, ev.Object)
					}
				}
				w.Stop()
			}
		}()
	}
}

func (l *kvLoop) snapshot() (cluster.Trace, []cluster.Attempt, *v1.VirtualMachine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var as []cluster.Attempt
	for _, a := range l.attempts {
		as = append(as, a)
	}
	return append(cluster.Trace(nil), l.trace...), as, l.vm
}

// newKVLoop follows the VM name of the given run strategy on the cluster
// of kc (nil: the lane's), and its launcher pods too if pods is set,
// until ctx ends.
func newKVLoop(ctx context.Context, kc kubecli.KubevirtClient, name string, strategy v1.VirtualMachineRunStrategy, pods bool) *kvLoop {
	l := &kvLoop{name: name, strategy: strategy, kc: kc, pods: pods, attempts: map[types.UID]cluster.Attempt{}}
	l.follow(ctx)
	return l
}

// client is the client of the loop's cluster.
func (l *kvLoop) client() kubecli.KubevirtClient {
	if l.kc == nil {
		return client
	}
	return l.kc
}

// attemptCount is how many VMIs of the VM have been seen.
func (l *kvLoop) attemptCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.attempts)
}

// firstFailedPath is the phases the first failed VMI went through and
// the field managers of its last copy seen: where the two stacks differ.
func (l *kvLoop) firstFailedPath() string {
	first := l.firstFailed()
	if first == nil {
		return "no failed VMI seen"
	}
	return fmt.Sprintf("VMI %s: %s, managers %s", first.UID, phasePath(first), strings.Join(managersOf(first.ManagedFields), ", "))
}

// firstFailed is the last copy seen of the first VMI seen Failed, or nil.
func (l *kvLoop) firstFailed() *v1.VirtualMachineInstance {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first *v1.VirtualMachineInstance
	for _, vmi := range l.vmis {
		if vmi.Status.Phase == v1.Failed && (first == nil || vmi.CreationTimestamp.Before(&first.CreationTimestamp)) {
			first = vmi
		}
	}
	return first
}

// phasePath is the phases a VMI went through, from its transition
// timestamps, joined with arrows.
func phasePath(vmi *v1.VirtualMachineInstance) string {
	var phases []string
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		phases = append(phases, string(t.Phase))
	}
	return strings.Join(phases, " → ")
}

// loopState is the VM's printable status and whether it carries a
// start-failure record, the two things a stop and a recovery decide.
func (l *kvLoop) loopState() string {
	_, _, vm := l.snapshot()
	if vm == nil {
		return "no VM seen"
	}
	return fmt.Sprintf("%s startFailure=%v", vm.Status.PrintableStatus, vm.Status.StartFailure != nil)
}

// checkKVLoop asserts the lane's rules for one of KubeVirt's crash loops
// over failure counts 1..upTo: the counts came in order and each showed
// CrashLoopBackOff, and every retry started inside KubeVirt's envelope
// (2 s of slack: Kubernetes timestamps have whole seconds). looping says
// the VM is still in its loop, so its start-failure record is checked
// too. It returns the trace and the gaps as table lines named who.
func checkKVLoop(l *kvLoop, who string, upTo int, looping bool) (cluster.Trace, string) {
	tr, as, vm := l.snapshot()
	gaps := cluster.Gaps(as, 1)
	Expect(len(gaps)).To(BeNumerically(">=", upTo), "%s gaps %+v", who, gaps)
	Expect(cluster.CheckEnvelope(gaps[:upTo], 2*time.Second)).To(Succeed(), "%s gaps %+v", who, gaps)
	var counts, want []int
	for _, c := range tr.Counts() {
		if c >= 1 && c <= upTo {
			counts = append(counts, c)
		}
	}
	for n := 1; n <= upTo; n++ {
		want = append(want, n)
		Expect(tr.StatusesAt(n)).To(ContainElement(string(v1.VirtualMachineStatusCrashLoopBackOff)), "%s statuses at count %d: %+v", who, n, tr)
	}
	Expect(counts).To(Equal(want), "%s start-failure counts, trace %+v", who, tr)
	if looping {
		Expect(vm.Status.StartFailure).NotTo(BeNil(), "%s start failure", who)
		Expect(vm.Status.StartFailure.ConsecutiveFailCount).To(BeNumerically(">=", upTo), "%s start-failure count", who)
	}
	return tr, gapTable(who, gaps, upTo) + fmt.Sprintf("%-32s first failed %s\n", who, l.firstFailedPath())
}

// stopKVLoops stops KubeVirt's Always and RerunOnFailure loops in the
// middle, as the lane's stop scenario does: the stop subresource for
// Always; for RerunOnFailure, once no VMI is live, the stop subresource
// (KubeVirt v1.6.0 refuses it with 409), runStrategy Halted (which
// virt-controller turns into Always while a Start request is pending), and
// what does stop it. The caller waits for both to show Stopped.
func stopKVLoops(ctx context.Context, always, rerun *kvLoop) {
	By("KubeVirt, Always: the stop subresource")
	Expect(always.client().VirtualMachine(namespace()).Stop(ctx, always.name, &v1.StopOptions{})).To(Succeed())

	By("KubeVirt, RerunOnFailure: the stop subresource while no VMI is live")
	// The loops' spec ends when the fourth attempt appears, and that VMI
	// may still be pending or scheduling; virt-api lets a stop through
	// while a VMI is live, so wait for it to fail and be removed (the
	// backoff after failure 4 then leaves well over a minute of no VMI).
	kc := rerun.client()
	Eventually(func() string {
		vmi, err := kc.VirtualMachineInstance(namespace()).Get(ctx, rerun.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return ""
		case err != nil:
			return err.Error()
		case vmi.IsFinal():
			return ""
		}
		return fmt.Sprintf("VMI %s is %s", vmi.UID, vmi.Status.Phase)
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeEmpty(), "KubeVirt %s", rerun.name)
	vms := kc.VirtualMachine(namespace())
	err := vms.Stop(ctx, rerun.name, &v1.StopOptions{})
	fmt.Fprintf(GinkgoWriter, "KubeVirt stop of RerunOnFailure VM %s in CrashLoopBackOff: %v\n", rerun.name, err)
	if lite != nil {
		// KubeVirt v1.6.0, pkg/virt-api/rest/lifecycle.go: for
		// RerunOnFailure and Manual, no VMI or a final one is a conflict.
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "expected KubeVirt v1.6.0's 409, got %v", err)
		Expect(err.Error()).To(ContainSubstring("VM is not running"))
	}
	if err == nil {
		return
	}
	By("KubeVirt, RerunOnFailure: runStrategy Halted, which virt-controller turns into Always")
	// The failed VMI is gone and a Start request waits in
	// status.stateChangeRequests for the backoff to expire; with Halted,
	// no VMI and a Start request pending, virt-controller sets
	// runStrategy: Always (pkg/virt-controller/watch/vm/vm.go, case
	// RunStrategyHalted) and the loop goes on.
	halt := []byte(`[{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]`)
	_, err = vms.Patch(ctx, rerun.name, types.JSONPatchType, halt, metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
	flipped := Eventually(func() v1.VirtualMachineRunStrategy {
		vm, err := vms.Get(ctx, rerun.name, metav1.GetOptions{})
		if err != nil || vm.Spec.RunStrategy == nil {
			return ""
		}
		return *vm.Spec.RunStrategy
	}).WithTimeout(15 * time.Second).WithPolling(100 * time.Millisecond)
	if lite != nil {
		flipped.Should(Equal(v1.RunStrategyAlways), "KubeVirt v1.6.0 rewrites Halted to Always while a Start request is pending")
		_, _, vm := rerun.snapshot()
		// Halted may have cleared the start-failure record by now.
		count := "none"
		if vm.Status.StartFailure != nil {
			count = strconv.Itoa(vm.Status.StartFailure.ConsecutiveFailCount)
		}
		fmt.Fprintf(GinkgoWriter, "KubeVirt RerunOnFailure after runStrategy Halted: runStrategy %s, %s, startFailure count %s, stateChangeRequests %v\n",
			*vm.Spec.RunStrategy, vm.Status.PrintableStatus, count, vm.Status.StateChangeRequests)
	}

	By("KubeVirt, RerunOnFailure: what stops it: drop the pending Start request from the status, then Halted")
	// A merge patch's null removes the requests if they are still there:
	// on a loaded machine virt-controller can act on the Start request
	// (with Always, a new VMI) before this patch, which CI's rehearsal of
	// stop 31 saw (stateChangeRequests [] and the VM Starting above); a
	// JSON patch's remove of the missing path is refused (422). Halted
	// then stops that VMI instead, and the caller's wait for Stopped
	// holds either way.
	drop := []byte(`{"status":{"stateChangeRequests":null}}`)
	_, err = vms.Patch(ctx, rerun.name, types.MergePatchType, drop, metav1.PatchOptions{}, "status")
	Expect(err).NotTo(HaveOccurred())
	_, err = vms.Patch(ctx, rerun.name, types.JSONPatchType, halt, metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// recoverKVLoops removes the fail-fast annotation from both stopped VMs
// and starts them again: Always through the start subresource (the stop
// left it Halted), RerunOnFailure by setting its runStrategy back. It
// returns when it began, for the check that nothing started before.
func recoverKVLoops(ctx context.Context, always, rerun *kvLoop) time.Time {
	patch, err := cluster.RemoveTemplateAnnotationPatch(failFast)
	Expect(err).NotTo(HaveOccurred())
	startedAt := time.Now()
	for _, l := range []*kvLoop{always, rerun} {
		_, err := l.client().VirtualMachine(namespace()).Patch(ctx, l.name, types.JSONPatchType, patch, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "removing the annotation of %s", l.name)
	}
	Expect(always.client().VirtualMachine(namespace()).Start(ctx, always.name, &v1.StartOptions{})).To(Succeed())
	back, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/runStrategy", "value": string(v1.RunStrategyRerunOnFailure)}})
	_, err = rerun.client().VirtualMachine(namespace()).Patch(ctx, rerun.name, types.JSONPatchType, back, metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
	return startedAt
}

// ourLoop is the same VM run by our virt-controller.
type ourLoop struct {
	name     string
	manifest string
}

func (o ourLoop) snapshot(p *ctlharness.Proc) (cluster.Trace, []cluster.Attempt) {
	evs := p.Events("", namespace()+"/"+o.name)
	return cluster.ControllerTrace(evs), cluster.ControllerAttempts(evs)
}

// createdBetween counts attempts created after from and before to, with
// one second of margin at the end for Kubernetes' whole-second timestamps.
func createdBetween(as []cluster.Attempt, from, to time.Time) int {
	n := 0
	for _, a := range as {
		if a.Created.After(from) && a.Created.Before(to.Add(-time.Second)) {
			n++
		}
	}
	return n
}

// gapTable prints the first n gaps of a run, one line each.
func gapTable(who string, gaps []cluster.Gap, n int) string {
	var b strings.Builder
	for i, g := range gaps {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "%-32s failure %d: waited %6.2fs, envelope %v..%v\n", who, g.Count, g.Observed.Seconds(), g.Low, g.High)
	}
	return b.String()
}

// createOnCluster creates vm on the lane's cluster and, when the spec's
// container ends, deletes it and waits for its VMI to go.
func createOnCluster(ctx context.Context, vm *v1.VirtualMachine) { createVMs(ctx, client, vm) }

// createVMs creates vms on the cluster of kc and, when the spec's
// container ends, deletes them all and then waits for their VMIs to go, so
// that their guests shut down at the same time.
func createVMs(ctx context.Context, kc kubecli.KubevirtClient, vms ...*v1.VirtualMachine) {
	var names []string
	for _, vm := range vms {
		_, err := kc.VirtualMachine(vm.Namespace).Create(ctx, vm, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "creating VM %s", vm.Name)
		names = append(names, vm.Name)
	}
	DeferCleanup(func() {
		bg := context.Background()
		for _, name := range names {
			_ = kc.VirtualMachine(namespace()).Delete(bg, name, metav1.DeleteOptions{})
		}
		for _, name := range names {
			Eventually(func() bool {
				_, err := kc.VirtualMachineInstance(namespace()).Get(bg, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "VMI %s not gone after its VM was deleted", name)
		}
	})
}

func writeVM(dir string, vm *v1.VirtualMachine) string {
	p := filepath.Join(dir, vm.Name+".yaml")
	m, err := testguest.Manifest(vm)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(p+".tmp", []byte(m), 0o644)).To(Succeed())
	Expect(os.Rename(p+".tmp", p)).To(Succeed())
	return p
}

var _ = Describe("crash loops on KubeVirt's own controller and on ours", Ordered, func() {
	const upTo = 3 // failure counts whose retry delay is checked
	var (
		ctx        context.Context
		cancel     context.CancelFunc
		kv         = map[v1.VirtualMachineRunStrategy]*kvLoop{}
		ours       = map[v1.VirtualMachineRunStrategy]ourLoop{}
		proc       *ctlharness.Proc
		work       string
		stoppedAt  time.Time
		strategies = []v1.VirtualMachineRunStrategy{v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure}
	)
	short := map[v1.VirtualMachineRunStrategy]string{v1.RunStrategyAlways: "always", v1.RunStrategyRerunOnFailure: "rerun"}

	BeforeAll(func() {
		ctx, cancel = context.WithCancel(context.Background())
		DeferCleanup(cancel)
		var err error
		work, err = os.MkdirTemp("", "cluster-lane-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, work)
		suffix := fmt.Sprintf("%d", time.Now().Unix()%100000)
		var manifests []string
		for _, s := range strategies {
			l := newKVLoop(ctx, nil, "kv-"+short[s]+"-"+suffix, s, false)
			createOnCluster(ctx, crashingVM(l.name, s, lite != nil))
			kv[s] = l
			o := ourLoop{name: "ours-" + short[s] + "-" + suffix}
			o.manifest = writeVM(work, crashingVM(o.name, s, true))
			ours[s] = o
			manifests = append(manifests, o.manifest)
		}
		proc = ctlharness.Start(bins, filepath.Join(work, "state"), work, int(time.Now().UnixNano()%1000), nil, manifests...)
	})

	It("loops with counts 1, 2, 3, shows CrashLoopBackOff, and waits inside KubeVirt's envelope on both controllers", func() {
		By("waiting for the fourth attempt of every VM (the retry after failure 3)")
		Eventually(func() string {
			var missing []string
			for _, s := range strategies {
				if n := kv[s].attemptCount(); n < upTo+1 {
					missing = append(missing, fmt.Sprintf("%s: %d attempts", kv[s].name, n))
				}
				if _, as := ours[s].snapshot(proc); len(as) < upTo+1 {
					missing = append(missing, fmt.Sprintf("%s: %d attempts", ours[s].name, len(as)))
				}
			}
			return strings.Join(missing, ", ")
		}).WithTimeout(6 * time.Minute).WithPolling(time.Second).Should(BeEmpty())

		var table strings.Builder
		for _, s := range strategies {
			kvTrace, kvTable := checkKVLoop(kv[s], "KubeVirt "+string(s), upTo, true)
			ourTrace, ourAttempts := ours[s].snapshot(proc)
			ourGaps := cluster.Gaps(ourAttempts, 1)
			table.WriteString(kvTable)
			table.WriteString(gapTable("ours "+string(s), ourGaps, upTo))
			Expect(len(ourGaps)).To(BeNumerically(">=", upTo), "our %s gaps %+v", s, ourGaps)
			// Ours are exact to the nanosecond (KubeVirt's timestamps
			// have whole seconds, hence its 2 s).
			Expect(cluster.CheckEnvelope(ourGaps[:upTo], 500*time.Millisecond)).To(Succeed(), "ours %s", s)
			Expect(cluster.CompareLoops(kvTrace, ourTrace, "KubeVirt "+string(s), "ours "+string(s), upTo)).To(Succeed(),
				"KubeVirt trace %+v\nour trace %+v", kvTrace, ourTrace)
			fmt.Fprintf(GinkgoWriter, "KubeVirt %s statuses by count: %v / %v / %v; ours: %v / %v / %v\n", s,
				kvTrace.StatusesAt(1), kvTrace.StatusesAt(2), kvTrace.StatusesAt(3), ourTrace.StatusesAt(1), ourTrace.StatusesAt(2), ourTrace.StatusesAt(3))
		}
		fmt.Fprint(GinkgoWriter, table.String())
		Expect(os.WriteFile(filepath.Join(artifacts, "gaps.txt"), []byte(table.String()), 0o644)).To(Succeed())
	})

	It("stops in the middle of the loop and clears the record; KubeVirt refuses to stop RerunOnFailure, ours does not", func() {
		stoppedAt = time.Now()
		stopKVLoops(ctx, kv[v1.RunStrategyAlways], kv[v1.RunStrategyRerunOnFailure])

		By("ours, both strategies: virt-controller stop")
		for _, s := range strategies {
			_, errs, code := ctlharness.CLI(bins.Controller, "stop", ours[s].name, "--state-dir", filepath.Join(work, "state"))
			Expect(code).To(Equal(0), "our stop of %s (%s): %s", ours[s].name, s, errs)
		}

		for _, s := range strategies {
			Eventually(kv[s].loopState).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Stopped startFailure=false"), "KubeVirt %s", s)
			Eventually(func() string {
				st := ctlharness.Status(bins.Controller, filepath.Join(work, "state"), ours[s].name)
				return fmt.Sprintf("%s startFailure=%v", st.Status.PrintableStatus, st.Status.StartFailure != nil)
			}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Stopped startFailure=false"), "ours %s", s)
		}
	})

	It("recovers to Running with the record cleared once the fail-fast annotation is gone", func() {
		startedAt := recoverKVLoops(ctx, kv[v1.RunStrategyAlways], kv[v1.RunStrategyRerunOnFailure])

		for _, s := range strategies {
			// The manifest is our controller's VM object: the same edits
			// as on the cluster. Always: annotation gone, runStrategy as
			// the stop left it (Halted), then start. RerunOnFailure:
			// annotation gone and runStrategy back, which starts it.
			strategy := s
			if s == v1.RunStrategyAlways {
				strategy = v1.RunStrategyHalted
			}
			vm := crashingVM(ours[s].name, strategy, true)
			delete(vm.Spec.Template.ObjectMeta.Annotations, failFast)
			writeVM(work, vm)
			Eventually(func() int { return len(proc.Events(controller.EventManifestChanged, namespace()+"/"+ours[s].name)) }).
				WithTimeout(30*time.Second).Should(BeNumerically(">=", 1), "our controller did not notice the edit of %s", ours[s].manifest)
			if s == v1.RunStrategyAlways {
				_, errs, code := ctlharness.CLI(bins.Controller, "start", ours[s].name, "--state-dir", filepath.Join(work, "state"))
				Expect(code).To(Equal(0), "our start of %s: %s", ours[s].name, errs)
			}
		}

		for _, s := range strategies {
			Eventually(kv[s].loopState).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Running startFailure=false"), "KubeVirt %s", s)
			Eventually(func() string {
				st := ctlharness.Status(bins.Controller, filepath.Join(work, "state"), ours[s].name)
				return fmt.Sprintf("%s startFailure=%v", st.Status.PrintableStatus, st.Status.StartFailure != nil)
			}).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Running startFailure=false"), "ours %s", s)
		}

		if lite != nil && laneRuntime() == "podman" {
			By("KubeVirt's Running VMs run in podman containers of their launcher pods")
			for _, s := range strategies {
				vmi, err := client.VirtualMachineInstance(namespace()).Get(ctx, kv[s].name, metav1.GetOptions{})
				Expect(err).NotTo(HaveOccurred())
				pod := launcherPodOf(ctx, vmi)
				Expect(pod).NotTo(BeNil(), "the launcher pod of %s", kv[s].name)
				cs := containersOfPod(pod.UID)
				Expect(cs).To(HaveLen(1), "containers of pod %s", pod.Name)
				Expect([]string{cs[0].State.Status, cs[0].ImageName}).To(Equal([]string{"running", launcherImage}), "container of pod %s", pod.Name)
			}
		}

		By("no attempt was made between the stop and the start")
		for _, s := range strategies {
			_, kvAttempts, _ := kv[s].snapshot()
			_, ourAttempts := ours[s].snapshot(proc)
			Expect(createdBetween(kvAttempts, stoppedAt, startedAt)).To(BeZero(), "KubeVirt %s", s)
			Expect(createdBetween(ourAttempts, stoppedAt, startedAt)).To(BeZero(), "ours %s", s)
		}
	})
})
