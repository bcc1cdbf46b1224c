package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/cluster"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/vmops"
)

// The matrix rows that are not requests during a backoff: the record
// cleared on Running, a failure after Running, RerunOnFailure after a
// Succeeded VMI, template edits during a backoff, a stop while a VMI is
// still starting, and the retry time against KubeVirt's band. Each drives
// its own pair of VMs (see plans in matrix_test.go).

// kubevirtVersion is the KubeVirt release the cluster runs, as its
// KubeVirt CR records it (cluster-lite's kubevirt-manifests writes the
// release it was built from, `make clusterlite KUBEVIRT_VERSION=...`).
func kubevirtVersion(ctx context.Context) string { return kubevirtVersionOf(ctx, client) }

// kubevirtVersionOf is kubevirtVersion of the cluster of kc.
func kubevirtVersionOf(ctx context.Context, kc kubecli.KubevirtClient) string {
	list, err := kc.KubeVirt(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred(), "listing the cluster's KubeVirt CRs for the KubeVirt version")
	for _, kv := range list.Items {
		if v := kv.Status.ObservedKubeVirtVersion; v != "" {
			return v
		}
	}
	return "(version not recorded in the KubeVirt CR)"
}

// ourSnapshot is our controller's status of the row's VM.
func (p matrixPair) ourSnapshot(ctx context.Context) *controller.Snapshot {
	resp, err := controller.Call(ctx, p.state, controller.Request{Op: "status", VM: p.ourName})
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.VMs).To(HaveLen(1), resp.Error)
	return resp.VMs[0]
}

// ourAttempts are the VMIs our controller made for the row's VM.
func (p matrixPair) ourAttempts() []cluster.Attempt {
	return cluster.ControllerAttempts(p.proc.Events("", namespace()+"/"+p.ourName))
}

// kvAttempts are the VMIs KubeVirt's controller made for the row's VM.
func (p matrixPair) kvAttempts() []cluster.Attempt {
	_, as, _ := p.kvl.snapshot()
	return as
}

// inBackoff: a counted failure, no VMI, and more than minLeft to wait.
func inBackoff(vm *v1.VirtualMachine, s vmState, minLeft time.Duration) bool {
	if s.Count < 1 || s.VMI {
		return false
	}
	ra := vm.Status.StartFailure.RetryAfterTimestamp
	return ra != nil && time.Until(ra.Time) > minLeft
}

// matrixCount is the start-failure count at which a row in backoff acts
// (Once's rows: its one failure).
const matrixCount = 2

// atBackoff waits on each side, in its own time, until its VM is ready
// (in backoff at the count the row wants), and then runs that side's act
// at once; it returns both VMs and states as they were just before the
// acts, and our controller's exact retry time then (for addRetryBand: an
// act may change it). The two sides draw their delays independently and a KubeVirt
// attempt lasts as long as its pod takes to fail, which under KubeVirt's
// virt-handler is the pod's start (sandbox, pod network, init containers:
// 5 s alone, up to 40 s while the other rows' pods start on 2 cores), so
// the sides reach a count at different times; waiting until both are in
// backoff at once made the rows meet only at count 4 or 5, or not at all.
// A side's VM controller decides by its own record, not by the other's
// clock, so each is compared at the same count, not at the same moment.
func atBackoff(ctx context.Context, p matrixPair, id string, ready func(*v1.VirtualMachine, vmState) bool, kvAct, ourAct func()) (kvVM, ourVM *v1.VirtualMachine, kvS, ourS vmState, ourRetry *time.Time) {
	wait := func(who string, get func() (*v1.VirtualMachine, vmState), vm **v1.VirtualMachine, s *vmState, act func()) func() {
		return func() {
			Eventually(func() bool {
				*vm, *s = get()
				return ready(*vm, *s)
			}).WithTimeout(5*time.Minute).WithPolling(250*time.Millisecond).Should(BeTrue(), "row %s: %s never ready in backoff, last %s", id, who, s)
			if act != nil {
				act()
			}
		}
	}
	bothSides(
		wait("KubeVirt", func() (*v1.VirtualMachine, vmState) { return p.kv(ctx) }, &kvVM, &kvS, kvAct),
		wait("ours", func() (*v1.VirtualMachine, vmState) {
			snap := p.ourSnapshot(ctx)
			ourRetry = snap.RetryAfter
			return snap.VM, stateOf(snap.VM, snap.VMI != nil)
		}, &ourVM, &ourS, ourAct))
	return kvVM, ourVM, kvS, ourS, ourRetry
}

// inBackoffAt is atBackoff's readiness of the rows of matrix_rows_test.go:
// Always at failure matrixCount with more than minLeft to wait.
func inBackoffAt(minLeft time.Duration) func(*v1.VirtualMachine, vmState) bool {
	return func(vm *v1.VirtualMachine, s vmState) bool {
		return s.Count == matrixCount && inBackoff(vm, s, minLeft)
	}
}

// bothSides runs kv and ours at the same time and returns when both did.
func bothSides(kv, ours func()) {
	var wg sync.WaitGroup
	for _, f := range []func(){kv, ours} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer GinkgoRecover()
			f()
		}()
	}
	wg.Wait()
}

// waitState polls one side until ok holds (at most timeout) and returns
// the last state seen and whether ok held, so that a row records what it
// saw instead of timing out.
func waitState(get func() vmState, ok func(vmState) bool, timeout time.Duration) (vmState, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s := get()
		if ok(s) || time.Now().After(deadline) {
			return s, ok(s)
		}
		<-time.After(200 * time.Millisecond)
	}
}

// templateEdit gives a VM the fail-fast VM's template with annotations
// instead of the fail-fast one and labels added, on one side: kv patches
// the cluster's VM, ours rewrites our manifest and returns once our
// controller reloaded it. The cluster's patch adds before it removes, so
// no VMI is ever made from a template with neither the old nor the new
// annotations.
type templateEdit struct {
	annotations, labels map[string]string
}

func (e templateEdit) kv(ctx context.Context, p matrixPair) {
	var ops []map[string]any
	for k, v := range e.annotations {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/template/metadata/annotations/" + strings.ReplaceAll(k, "/", "~1"), "value": v})
	}
	if len(e.labels) > 0 {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/template/metadata/labels", "value": e.labels})
	}
	if _, keep := e.annotations[failFast]; !keep {
		ops = append(ops, map[string]any{"op": "remove", "path": "/spec/template/metadata/annotations/" + strings.ReplaceAll(failFast, "/", "~1")})
	}
	patch, err := json.Marshal(ops)
	Expect(err).NotTo(HaveOccurred())
	_, err = p.kc.VirtualMachine(namespace()).Patch(ctx, p.kvName, types.JSONPatchType, patch, metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred(), "patching the template of %s: %s", p.kvName, patch)
}

func (e templateEdit) ours(p matrixPair, work string, strategy v1.VirtualMachineRunStrategy) {
	since := time.Now()
	vm := matrixVM(p.ourName, strategy, true)
	vm.Spec.Template.ObjectMeta.Annotations = e.annotations
	vm.Spec.Template.ObjectMeta.Labels = e.labels
	writeVM(work, vm)
	Eventually(func() bool {
		for _, e := range p.proc.Events(controller.EventManifestChanged, namespace()+"/"+p.ourName) {
			if e.Time.After(since) {
				return true
			}
		}
		return false
	}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(BeTrue(), "our controller did not reload the manifest of %s", p.ourName)
}

// editInBackoff makes the edit on each side once that side is in backoff
// at failure matrixCount with more than minLeft to wait (atBackoff), and
// returns both as they were just before.
func (e templateEdit) editInBackoff(ctx context.Context, p matrixPair, id, work string, minLeft time.Duration) (kvVM, ourVM *v1.VirtualMachine, kvS, ourS vmState, ourRetry *time.Time) {
	return atBackoff(ctx, p, id, inBackoffAt(minLeft), func() { e.kv(ctx, p) }, func() { e.ours(p, work, v1.RunStrategyAlways) })
}

// ourFinalAt is when our controller recorded that VMI uid ended: its
// first Failed, Succeeded or Exited event (the moment it set the final
// phase).
func (p matrixPair) ourFinalAt(uid types.UID) (time.Time, bool) {
	for _, e := range p.proc.Events("", namespace()+"/"+p.ourName) {
		if e.VMIUID == string(uid) && (e.Event == controller.EventFailed || e.Event == controller.EventSucceeded || e.Event == controller.EventExited) {
			return e.Time, true
		}
	}
	return time.Time{}, false
}

// kvFinalAt is the Failed (or Succeeded) phaseTransitionTimestamp of
// KubeVirt's VMI uid, as the watch saw it before the VMI was deleted.
func (p matrixPair) kvFinalAt(uid types.UID) (time.Time, bool) {
	for _, a := range p.kvAttempts() {
		if a.UID == string(uid) && !a.Finished.IsZero() {
			return a.Finished, true
		}
	}
	return time.Time{}, false
}

// Slack of the retry-band check. KubeVirt's side: both of its timestamps
// are RFC 3339 whole seconds (truncated), which keeps the lower bound
// exact (trunc(t+lo) = trunc(t)+lo for whole-second lo, and the retry is
// counted no earlier than the failure) and adds up to 1 s above; 1 s more
// for virt-controller to see the failed VMI. Ours: the retry time is exact
// and counted in the sync that sees the final phase.
const (
	kvBandSlack  = 2 * time.Second
	ourBandSlack = 500 * time.Millisecond
)

// addRetryBand records whether each side's retry time lies in KubeVirt's
// band for its count: retryAfterTimestamp minus the time of the failure
// it follows within [lo, hi] of backoff.KubeVirt{}.Bounds(count) (10 s·n²
// to 15 s·n², capped at 300 s).
//
// The time of the failure, as each side shows it: on the cluster, the
// failed VMI's Failed (or Succeeded) phaseTransitionTimestamp, written when
// the VMI reached it and read off the watch (the VM controller deletes the
// VMI when it counts it); on ours, the time our controller recorded the
// VMI's final phase (its Failed, Succeeded or Exited event for the UID in
// status.startFailure.lastFailedVMIUID), against the exact retry time of
// its status (the JSON status has whole seconds only).
func addRetryBand(m *matrix, id string, p matrixPair, kvVM, ourVM *v1.VirtualMachine, ourRetry *time.Time) {
	kvText, kvOK := bandText(kvVM.Status.StartFailure, nil, p.kvFinalAt, kvBandSlack)
	ourText, ourOK := bandText(ourVM.Status.StartFailure, ourRetry, p.ourFinalAt, ourBandSlack)
	m.add(id, "retryAfterTimestamp minus the failure's time inside KubeVirt's band for the count (10 s·n² to 15 s·n², at most 300 s)",
		kvText, ourText, kvOK && ourOK, "")
}

// bandText checks one side's record; exact, when set, is the retry time
// at full precision.
func bandText(sf *v1.VirtualMachineStartFailure, exact *time.Time, finalAt func(types.UID) (time.Time, bool), slack time.Duration) (string, bool) {
	if sf == nil || sf.RetryAfterTimestamp == nil {
		return "no retryAfterTimestamp", false
	}
	retry := sf.RetryAfterTimestamp.Time
	if exact != nil {
		retry = *exact
	}
	failed, ok := finalAt(sf.LastFailedVMIUID)
	if !ok {
		return fmt.Sprintf("count %d: the final phase of VMI %s was not observed", sf.ConsecutiveFailCount, sf.LastFailedVMIUID), false
	}
	lo, hi := backoff.KubeVirt{}.Bounds(sf.ConsecutiveFailCount)
	d := retry.Sub(failed)
	in := d >= lo && d <= hi+slack
	verdict := "inside"
	if !in {
		verdict = "OUTSIDE"
	}
	return fmt.Sprintf("count %d: %s after the failure, %s %s..%s (+%s)", sf.ConsecutiveFailCount, d.Round(time.Millisecond), verdict, lo, hi, slack), in
}

// poweroffVM is the test guest that powers itself off 2 s after it is
// ready (Succeeded after Running).
func poweroffVM(name string, _ bool) *v1.VirtualMachine {
	vm := testguest.VM(name, v1.RunStrategyRerunOnFailure, nil, testguest.KernelArgs+" harness.poweroff=2")
	vm.Namespace = namespace()
	return vm
}

// ranAndEnded is the first attempt that reached Running and ended.
func ranAndEnded(as []cluster.Attempt) (cluster.Attempt, bool) {
	for _, a := range as {
		if a.Running && !a.Finished.IsZero() {
			return a, true
		}
	}
	return cluster.Attempt{}, false
}

// nextAfter is the first attempt created after a.
func nextAfter(as []cluster.Attempt, a cluster.Attempt) (cluster.Attempt, bool) {
	var next cluster.Attempt
	found := false
	for _, b := range as {
		if b.Created.After(a.Created) && (!found || b.Created.Before(next.Created)) {
			next, found = b, true
		}
	}
	return next, found
}

// maxCountSince is the largest start-failure count a trace shows from t on.
func maxCountSince(t cluster.Trace, since time.Time) int {
	n := 0
	for _, s := range t {
		if !s.At.Before(since) {
			n = max(n, s.Count)
		}
	}
	return n
}

func isRunning(s vmState) bool { return s.Printable == string(v1.VirtualMachineStatusRunning) }

// runClearOnRunning: Always, fail-fast, in backoff; the fail-fast
// annotation removed from the template; the next VMI reaches Running and
// the record is cleared (rule C3).
func runClearOnRunning(ctx context.Context, m *matrix, p matrixPair, work string) {
	const id = "clear-running"
	_, _, kvS, ourS, _ := templateEdit{annotations: map[string]string{}}.editInBackoff(ctx, p, id, work, 0)
	m.add(id+" 0", "Always, fail-fast, in backoff", kvS.String(), ourS.String(), kvS == ourS, "")
	ok := func(s vmState) bool { return isRunning(s) && s.Count == 0 }
	kvS, _ = waitState(func() vmState { _, s := p.kv(ctx); return s }, ok, 4*time.Minute)
	ourS, _ = waitState(func() vmState { _, s := p.ours(ctx); return s }, ok, time.Minute)
	m.add(id+" 1", "fail-fast annotation removed from the template during the backoff: the next VMI reaches Running, startFailure cleared",
		kvS.String(), ourS.String(), kvS == ourS, "")
}

// runFailureAfterRunning: Always, fail-fast, in backoff; the template then
// has QEMU killed 30 s after the domain started instead (qemu-kill, after
// Running: Failed/VMCrashed); the next VMI reaches Running and fails. That
// failure is not counted (rule C13): the record stays cleared and the VM
// restarts at once, without a backoff.
func runFailureAfterRunning(ctx context.Context, m *matrix, p matrixPair, work string) {
	const id = "running-fail"
	edit := templateEdit{annotations: map[string]string{faults.AnnotationPrefix + "qemu-kill": "after=30s"}}
	_, _, kvS, ourS, _ := edit.editInBackoff(ctx, p, id, work, 0)
	m.add(id+" 0", "Always, fail-fast, in backoff", kvS.String(), ourS.String(), kvS == ourS, "")

	// Each side: a VMI that ran and failed, and the next one Running.
	type side struct {
		attempts func() []cluster.Attempt
		trace    func() cluster.Trace
		state    func() vmState
	}
	describe := func(s side, timeout time.Duration) (string, int, time.Duration, vmState, bool) {
		var failed, next cluster.Attempt
		st, ok := waitState(s.state, func(st vmState) bool {
			var ok1, ok2 bool
			as := s.attempts()
			if failed, ok1 = ranAndEnded(as); ok1 {
				next, ok2 = nextAfter(as, failed)
			}
			return ok1 && ok2 && isRunning(st)
		}, timeout)
		if !ok {
			return "no VMI that ran, failed and was followed by a Running one; now " + st.String(), -1, 0, st, false
		}
		gap := next.Created.Sub(failed.Finished)
		n := maxCountSince(s.trace(), failed.Finished)
		return fmt.Sprintf("after the failure: highest count %d, next VMI %s later; then %s", n, gap.Round(100*time.Millisecond), st), n, gap, st, true
	}
	kvText, kvN, kvGap, kvS2, kvOK := describe(side{
		attempts: p.kvAttempts,
		trace:    func() cluster.Trace { t, _, _ := p.kvl.snapshot(); return t },
		state:    func() vmState { _, s := p.kv(ctx); return s },
	}, 5*time.Minute)
	ourText, ourN, ourGap, ourS2, ourOK := describe(side{
		attempts: p.ourAttempts,
		trace:    func() cluster.Trace { return cluster.ControllerTrace(p.proc.Events("", namespace()+"/"+p.ourName)) },
		state:    func() vmState { _, s := p.ours(ctx); return s },
	}, 2*time.Minute)
	// No backoff: the next VMI came sooner than the shortest one.
	shortest, _ := backoff.KubeVirt{}.Bounds(1)
	same := kvOK && ourOK && kvN == ourN && kvGap < shortest && ourGap < shortest && kvS2 == ourS2
	m.add(id+" 1", "Always: a VMI that reached Running fails (QEMU killed): not counted, record stays cleared, restarted without a backoff",
		kvText, ourText, same, "")
}

// runRerunSucceeded: RerunOnFailure, a guest that powers itself off after
// it is ready: the VMI Succeeded after Running and is not restarted.
func runRerunSucceeded(ctx context.Context, m *matrix, p matrixPair, _ string) {
	const id = "rerun-succeeded"
	ended := func(attempts func() []cluster.Attempt) func(vmState) bool {
		return func(vmState) bool { _, ok := ranAndEnded(attempts()); return ok }
	}
	kvGet := func() vmState { _, s := p.kv(ctx); return s }
	ourGet := func() vmState { _, s := p.ours(ctx); return s }
	_, kvOK := waitState(kvGet, ended(p.kvAttempts), 4*time.Minute)
	_, ourOK := waitState(ourGet, ended(p.ourAttempts), 2*time.Minute)
	// The VM controller deletes the Succeeded VMI (syncRunStrategy,
	// pkg/virt-controller/watch/vm/vm.go, case RerunOnFailure: stopVMI);
	// under KubeVirt's virt-handler it goes only once virt-handler's
	// clean-up removed its finalizer, which can outlast 3 s of stillness.
	// Then held still for 3 s: a restart would be at once (no record).
	gone := func(s vmState) bool { return !s.VMI }
	waitState(kvGet, gone, 2*time.Minute)
	waitState(ourGet, gone, time.Minute)
	kvS, ourS := settle(kvGet), settle(ourGet)
	kvText := fmt.Sprintf("powered off: %v, VMIs made %d; %s", kvOK, len(p.kvAttempts()), kvS)
	ourText := fmt.Sprintf("powered off: %v, VMIs made %d; %s", ourOK, len(p.ourAttempts()), ourS)
	m.add(id+" 1", "RerunOnFailure: the guest powers off (VMI Succeeded after Running): no restart",
		kvText, ourText, kvOK && ourOK && kvText == ourText, "")
}

// runTemplateEdit: Always, fail-fast, in backoff; a label added to the
// template (it keeps failing): the record stands (count, UID and retry
// time), and the next failure counts on from it.
func runTemplateEdit(ctx context.Context, m *matrix, p matrixPair, work string) {
	const id = "template-edit"
	edit := templateEdit{annotations: map[string]string{failFast: ""}, labels: map[string]string{"crashloop.dev/matrix-edit": "1"}}
	record := func(vm *v1.VirtualMachine) v1.VirtualMachineStartFailure {
		if vm.Status.StartFailure == nil {
			return v1.VirtualMachineStartFailure{}
		}
		return *vm.Status.StartFailure
	}
	// The record after the edit, held still for 3 s (the controllers sync
	// a VM within milliseconds of its change).
	describe := func(before v1.VirtualMachineStartFailure, get func() *v1.VirtualMachine) string {
		var last v1.VirtualMachineStartFailure
		settle(func() vmState {
			vm := get()
			last = record(vm)
			return stateOf(vm, false)
		})
		if last.ConsecutiveFailCount == before.ConsecutiveFailCount && last.LastFailedVMIUID == before.LastFailedVMIUID &&
			last.RetryAfterTimestamp.Equal(before.RetryAfterTimestamp) {
			return fmt.Sprintf("count %d, UID and retry time unchanged", last.ConsecutiveFailCount)
		}
		return fmt.Sprintf("changed: count %d→%d, UID %s→%s, retry %v→%v", before.ConsecutiveFailCount, last.ConsecutiveFailCount,
			before.LastFailedVMIUID, last.LastFailedVMIUID, before.RetryAfterTimestamp, last.RetryAfterTimestamp)
	}
	// Each side in its own time (atBackoff): the edit, the record after
	// it, then its next failure, which counts on from the record: n+1.
	type after struct {
		text string
		next vmState
	}
	side := func(get func() *v1.VirtualMachine, do func(), a *after, timeout time.Duration) func() {
		return func() {
			before := record(get())
			do()
			a.text = describe(before, get)
			want := before.ConsecutiveFailCount + 1
			a.next, _ = waitState(func() vmState { return stateOf(get(), false) }, func(s vmState) bool { return s.Count >= want }, timeout)
		}
	}
	var kvA, ourA after
	kvVM, ourVM, kvS, ourS, ourRetry := atBackoff(ctx, p, id, inBackoffAt(20*time.Second),
		side(func() *v1.VirtualMachine { vm, _ := p.kv(ctx); return vm }, func() { edit.kv(ctx, p) }, &kvA, 2*time.Minute),
		side(func() *v1.VirtualMachine { vm, _ := p.ours(ctx); return vm }, func() { edit.ours(p, work, v1.RunStrategyAlways) }, &ourA, time.Minute))
	m.add(id+" 0", "Always, fail-fast, in backoff", kvS.String(), ourS.String(), kvS == ourS, "")
	addRetryBand(m, id+" 0r", p, kvVM, ourVM, ourRetry)
	m.add(id+" 1", "Always in backoff, a label added to the template (still failing): the record stands",
		kvA.text, ourA.text, kvA.text == ourA.text && strings.HasSuffix(kvA.text, "unchanged"), "")
	want := matrixCount + 1
	m.add(id+" 2", fmt.Sprintf("the next failure after the edit counts on (%d)", want),
		fmt.Sprintf("count %d", kvA.next.Count), fmt.Sprintf("count %d", ourA.next.Count), kvA.next.Count == want && ourA.next.Count == want, "")
}

// runStopWhileScheduled: Always, fail-fast, in backoff; the template then
// holds the launcher before libvirt for 10 minutes (launcher-crash with a
// delay: the VMI is handed over, Scheduled, and never starts its domain);
// stop while that VMI is still starting.
//
// Upstream's Scheduling phase (the launcher pod created, not yet running)
// cannot be held on cluster-lite: on the agent stack the node agent reports
// a pod Running as soon as it binds it, and under KubeVirt's virt-handler
// once podman shows its containers running, which no fault of ours holds
// back; so this row holds the next phase, Scheduled. Under virt-handler
// the held launcher is our monitor's child, waiting before libvirt while
// virt-handler's SyncVirtualMachine waits for it.
func runStopWhileScheduled(ctx context.Context, m *matrix, p matrixPair, work string) {
	const id = "scheduled-stop"
	// Row 1 compares the counts while the next VMI is held: each side's
	// template edit must land before that side's retry, or it counts one
	// more fail-fast VMI (seen on CI: KubeVirt 1, ours 2). Our controller
	// rereads manifests every 250 ms; 5 s of the backoff left is ample.
	edit := templateEdit{annotations: map[string]string{faults.AnnotationPrefix + "launcher-crash": "at=before-libvirt,delay=10m"}}
	_, _, kvS, ourS, _ := edit.editInBackoff(ctx, p, id, work, 5*time.Second)
	m.add(id+" 0", "Always, fail-fast, in backoff", kvS.String(), ourS.String(), kvS == ourS, "")

	kvPhase := func() v1.VirtualMachineInstancePhase {
		vmi, err := p.kc.VirtualMachineInstance(namespace()).Get(ctx, p.kvName, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return vmi.Status.Phase
	}
	ourPhase := func() v1.VirtualMachineInstancePhase {
		if vmi := p.ourSnapshot(ctx).VMI; vmi != nil && !vmi.IsFinal() {
			return vmi.Status.Phase
		}
		return ""
	}
	Eventually(kvPhase).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal(v1.Scheduled), "KubeVirt's VMI of %s never Scheduled", p.kvName)
	Eventually(ourPhase).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Equal(v1.Scheduled), "our VMI of %s never Scheduled", p.ourName)
	_, kvS = p.kv(ctx)
	_, ourS = p.ours(ctx)
	m.add(id+" 1", "the next VMI held Scheduled (launcher before libvirt)", kvS.String(), ourS.String(), kvS == ourS, "")

	kvO, ourO := p.kvDo(ctx, vmops.OpStop), p.ourDo(vmops.OpStop)
	m.add(id+" 2", "stop: Always, VMI Scheduled", kvO.String(), ourO.String(), sameOutcome(kvO, ourO), "")
	stopped := func(s vmState) bool { return !s.VMI && s.Printable == string(v1.VirtualMachineStatusStopped) }
	kvS, _ = waitState(func() vmState { _, s := p.kv(ctx); return s }, stopped, 2*time.Minute)
	ourS, _ = waitState(func() vmState { _, s := p.ours(ctx); return s }, stopped, time.Minute)
	m.add(id+" 2'", "stop: Always, VMI Scheduled: state after", kvS.String(), ourS.String(), kvS == ourS, "")
}
