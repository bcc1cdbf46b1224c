package backoff

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	v1 "kubevirt.io/api/core/v1"
)

// The tables below restate KubeVirt v1.6.0's crash-loop rules (sections
// A-D and S of FidelityRules) row by row. Every row names its rule; a row
// whose rule upstream reads from code rather than a unit test of its own
// says fromCode. TestEveryRuleHasARow ties the tables to the rule list.

// curveRow is one failure count and its delay range in whole seconds.
type curveRow struct {
	rule     string
	fromCode bool
	count    int
	lo, hi   int
}

func curveRows() []curveRow {
	return []curveRow{
		{rule: "A1", count: 0, lo: 10, hi: 15}, // a count of zero is treated as one
		{rule: "A2", count: 1, lo: 10, hi: 15},
		{rule: "A3", count: 2, lo: 40, hi: 60},
		{rule: "A4", count: 3, lo: 90, hi: 135},
		{rule: "A5", count: 4, lo: 160, hi: 240},
		{rule: "A6", count: 5, lo: 250, hi: 300},
		{rule: "A7", count: 6, lo: 300, hi: 300},
		{rule: "A7", fromCode: true, count: 7, lo: 300, hi: 300},
	}
}

// scriptedRand returns next for every draw and records the bounds asked.
type scriptedRand struct {
	next  int
	asked []int
}

func (s *scriptedRand) IntN(n int) int {
	s.asked = append(s.asked, n)
	return min(s.next, n-1)
}

// distributionRow is the exact law of one count's delay, derived by
// drawing every possible jitter value once.
type distributionRow struct {
	rule     string
	fromCode bool
	count    int
	intnArg  int // upstream's rand.Intn argument: base/2 + 1
	atCap    int // how many of the intnArg values give 300 s
}

func distributionRows() []distributionRow {
	return []distributionRow{
		{rule: "A8", fromCode: true, count: 1, intnArg: 6, atCap: 0},
		{rule: "A8", fromCode: true, count: 2, intnArg: 21, atCap: 0},
		{rule: "A8", fromCode: true, count: 3, intnArg: 46, atCap: 0},
		{rule: "A8", fromCode: true, count: 4, intnArg: 81, atCap: 0},
		{rule: "A8", fromCode: true, count: 5, intnArg: 126, atCap: 76},
		{rule: "A9", fromCode: true, count: 6, intnArg: 181, atCap: 181},
		{rule: "A9", fromCode: true, count: 9, intnArg: 406, atCap: 406},
	}
}

func TestCurveRules(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range curveRows() {
		lo, hi := KubeVirt{}.Bounds(c.count)
		if int(lo/time.Second) != c.lo || int(hi/time.Second) != c.hi {
			t.Errorf("%s: Bounds(%d) = [%s, %s], want [%ds, %ds]", c.rule, c.count, lo, hi, c.lo, c.hi)
		}
		// Upstream's own check: 1000 draws inside the bounds.
		for range 1000 {
			if d := (KubeVirt{}).Delay(c.count, r); d < time.Duration(c.lo)*time.Second || d > time.Duration(c.hi)*time.Second {
				t.Fatalf("%s: Delay(%d) = %s outside [%ds, %ds]", c.rule, c.count, d, c.lo, c.hi)
			}
		}
	}
	for _, c := range distributionRows() {
		atCap := 0
		for v := range c.intnArg {
			s := &scriptedRand{next: v}
			d := KubeVirt{}.Delay(c.count, s)
			if !slices.Equal(s.asked, []int{c.intnArg}) {
				t.Fatalf("%s: count %d drew %v, want exactly one draw of IntN(%d)", c.rule, c.count, s.asked, c.intnArg)
			}
			if d == DefaultMaxDelay {
				atCap++
			}
		}
		if atCap != c.atCap {
			t.Errorf("%s: count %d: %d of %d jitter values give 300s, want %d", c.rule, c.count, atCap, c.intnArg, c.atCap)
		}
	}
}

// timeLeftRow is one start-failure record and the wait it gives.
type timeLeftRow struct {
	rule     string
	fromCode bool
	name     string
	retry    *time.Time // nil: no retry time in the record
	noRecord bool
	now      time.Time
	ours     time.Duration
	upstream int64
}

func timeLeftRows() []timeLeftRow {
	at := func(sec, ms int) *time.Time {
		tt := t0().Add(time.Duration(sec)*time.Second + time.Duration(ms)*time.Millisecond)
		return &tt
	}
	now := t0()
	return []timeLeftRow{
		{rule: "B1", name: "no vm start failures", noRecord: true, now: now, ours: 0, upstream: 0},
		{rule: "B2", name: "vm failure waiting 300 seconds", retry: at(300, 0), now: now, ours: 300 * time.Second, upstream: 300},
		{rule: "B3", name: "vm failure 300 seconds past retry time", retry: at(-300, 0), now: now, ours: 0, upstream: 0},
		{rule: "B4", fromCode: true, name: "retry later in the same second", retry: at(0, 900), now: now.Add(100 * time.Millisecond), ours: 800 * time.Millisecond, upstream: 0},
		{rule: "B5", fromCode: true, name: "retry across a second boundary", retry: at(1, 100), now: now.Add(900 * time.Millisecond), ours: 200 * time.Millisecond, upstream: 1},
		{rule: "B6", fromCode: true, name: "whole seconds", retry: at(10, 0), now: now, ours: 10 * time.Second, upstream: 10},
		{rule: "B7", fromCode: true, name: "record without a retry time", now: now, ours: 0, upstream: 0},
	}
}

func TestTimeLeftRules(t *testing.T) {
	for _, c := range timeLeftRows() {
		vm := newVM(v1.RunStrategyAlways)
		if !c.noRecord {
			vm.Status.StartFailure = &v1.VirtualMachineStartFailure{ConsecutiveFailCount: 1, LastFailedVMIUID: "123"}
			if c.retry != nil {
				rt := metav1.NewTime(*c.retry)
				vm.Status.StartFailure.RetryAfterTimestamp = &rt
			}
		}
		if got := TimeLeft(vm, c.now); got != c.ours {
			t.Errorf("%s %s: TimeLeft = %s, want %s", c.rule, c.name, got, c.ours)
		}
		if got := upstreamTimeLeftSeconds(vm, c.now); got != c.upstream {
			t.Errorf("%s %s: upstreamTimeLeftSeconds = %d, want %d", c.rule, c.name, got, c.upstream)
		}
	}
}

// record is a start-failure record whose retry time is retryIn from t0.
type record struct {
	count   int
	uid     types.UID
	retryIn time.Duration
}

func (r *record) set(vm *v1.VirtualMachine) *v1.VirtualMachine {
	if r != nil {
		rt := metav1.NewTime(t0().Add(r.retryIn))
		vm.Status.StartFailure = &v1.VirtualMachineStartFailure{ConsecutiveFailCount: r.count, LastFailedVMIUID: r.uid, RetryAfterTimestamp: &rt}
	}
	return vm
}

// fixtureVMI is upstream's default VMI: phase Running and no phase
// transition timestamps, unless phases are given.
func fixtureVMI(uid types.UID, phase v1.VirtualMachineInstancePhase, phases ...phaseAt) *v1.VirtualMachineInstance {
	vmi := newVMI(uid, phases...)
	vmi.Status.Phase = phase
	return vmi
}

// countRow is one reconcile of syncStartFailureStatus (and, for the other
// expectations upstream checks, syncRunStrategy).
type countRow struct {
	rule     string
	fromCode bool
	name     string
	vm       *v1.VirtualMachine
	before   *v1.VirtualMachineInstance // synced first, when set
	vmi      *v1.VirtualMachineInstance
	// want: count 0 means no record afterwards.
	wantCount  int
	wantUID    types.UID
	newRetry   bool // the retry time was (re)drawn
	deleteVMI  bool
	addRequest bool
}

func countRows() []countRow {
	vm := func(s v1.VirtualMachineRunStrategy, r *record) *v1.VirtualMachine { return r.set(newVM(s)) }
	past := &record{count: 1, uid: "123", retryIn: -300 * time.Second}
	ahead := &record{count: 1, uid: "123", retryIn: 300 * time.Second}
	failed := fixtureVMI("456", v1.Failed)
	both := vm(v1.RunStrategyAlways, &record{count: 2, uid: "a", retryIn: time.Minute})
	both.Spec.Running = ptr(true)
	edited := vm(v1.RunStrategyAlways, &record{count: 4, uid: "a", retryIn: time.Minute})
	edited.Spec.Template.ObjectMeta.Annotations = map[string]string{"edited": "yes"}
	edited.Generation = 7
	launchFailed := fixtureVMI("456", v1.Pending)
	launchFailed.Status.Conditions = []v1.VirtualMachineInstanceCondition{FailedCreateCondition(errors.New("exec: no such file"), t0())}
	return []countRow{
		{rule: "C1", name: "first failure without Running", vm: vm(v1.RunStrategyAlways, nil), vmi: fixtureVMI("123", v1.Failed),
			wantCount: 1, wantUID: "123", newRetry: true, deleteVMI: true},
		{rule: "C2", name: "new VMI fails without Running", vm: vm(v1.RunStrategyAlways, past), vmi: failed,
			wantCount: 2, wantUID: "456", newRetry: true, deleteVMI: true},
		{rule: "C3", name: "VMI hits Running", vm: vm(v1.RunStrategyAlways, past), vmi: fixtureVMI("456", v1.Running, phaseAt{v1.Running, 0})},
		{rule: "C4", name: "runStrategy Halted", vm: vm(v1.RunStrategyHalted, ahead), vmi: failed, deleteVMI: true},
		{rule: "C5", name: "runStrategy Always", vm: vm(v1.RunStrategyAlways, ahead), vmi: failed,
			wantCount: 2, wantUID: "456", newRetry: true, deleteVMI: true},
		{rule: "C6", name: "runStrategy Manual", vm: vm(v1.RunStrategyManual, ahead), vmi: failed},
		{rule: "C7", name: "runStrategy RerunOnFailure", vm: vm(v1.RunStrategyRerunOnFailure, ahead), vmi: failed,
			wantCount: 2, wantUID: "456", newRetry: true, deleteVMI: true, addRequest: true},
		{rule: "C8", name: "runStrategy Once", vm: vm(v1.RunStrategyOnce, ahead), vmi: failed,
			wantCount: 2, wantUID: "456", newRetry: true},
		{rule: "C9", fromCode: true, name: "same UID already counted", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("123", v1.Failed),
			wantCount: 1, wantUID: "123", deleteVMI: true},
		{rule: "C10", fromCode: true, name: "no VMI, Always", vm: vm(v1.RunStrategyAlways, ahead), wantCount: 1, wantUID: "123"},
		{rule: "C10", fromCode: true, name: "no VMI, RerunOnFailure", vm: vm(v1.RunStrategyRerunOnFailure, ahead), wantCount: 1, wantUID: "123"},
		{rule: "C10", fromCode: true, name: "no VMI, Once", vm: vm(v1.RunStrategyOnce, ahead), wantCount: 1, wantUID: "123"},
		{rule: "C11", fromCode: true, name: "no VMI, Halted", vm: vm(v1.RunStrategyHalted, ahead)},
		{rule: "C11", fromCode: true, name: "no VMI, Manual", vm: vm(v1.RunStrategyManual, ahead)},
		{rule: "C11", fromCode: true, name: "no VMI, WaitAsReceiver", vm: vm(v1.RunStrategyWaitAsReceiver, ahead)},
		{rule: "C11", fromCode: true, name: "no VMI, neither field set (Halted)", vm: vm("", ahead)},
		{rule: "C12", fromCode: true, name: "Succeeded without Running", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("456", v1.Succeeded),
			wantCount: 2, wantUID: "456", newRetry: true, deleteVMI: true},
		{rule: "C13", fromCode: true, name: "Failed after Running", vm: vm(v1.RunStrategyAlways, ahead),
			vmi: fixtureVMI("456", v1.Failed, phaseAt{v1.Running, 0}, phaseAt{v1.Failed, time.Second}), deleteVMI: true},
		{rule: "C14", fromCode: true, name: "Pending", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("456", v1.Pending), wantCount: 1, wantUID: "123"},
		{rule: "C14", fromCode: true, name: "Scheduling", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("456", v1.Scheduling), wantCount: 1, wantUID: "123"},
		{rule: "C14", fromCode: true, name: "Scheduled", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("456", v1.Scheduled), wantCount: 1, wantUID: "123"},
		{rule: "C14", fromCode: true, name: "Unknown", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("456", v1.Unknown), wantCount: 1, wantUID: "123"},
		{rule: "C15", fromCode: true, name: "phase Running without a timestamp", vm: vm(v1.RunStrategyAlways, ahead), vmi: fixtureVMI("456", v1.Running),
			wantCount: 1, wantUID: "123"},
		{rule: "C16", fromCode: true, name: "running and runStrategy both set, no VMI", vm: both.DeepCopy(), wantCount: 2, wantUID: "a"},
		{rule: "C16", fromCode: true, name: "running and runStrategy both set, VMI failed early", vm: both.DeepCopy(), vmi: failed,
			wantCount: 3, wantUID: "456", newRetry: true},
		{rule: "C16", fromCode: true, name: "running and runStrategy both set, VMI ran", vm: both.DeepCopy(),
			vmi: fixtureVMI("456", v1.Running, phaseAt{v1.Running, 0})},
		{rule: "C17", fromCode: true, name: "count restarts at 1 after a clear", vm: vm(v1.RunStrategyAlways, &record{count: 5, uid: "a", retryIn: -time.Second}),
			before: fixtureVMI("b", v1.Running, phaseAt{v1.Running, 0}), vmi: fixtureVMI("c", v1.Failed),
			wantCount: 1, wantUID: "c", newRetry: true, deleteVMI: true},
		{rule: "C18", fromCode: true, name: "template edited", vm: edited, wantCount: 4, wantUID: "a"},
		{rule: "C19", fromCode: true, name: "launcher could not be created", vm: vm(v1.RunStrategyAlways, ahead), vmi: launchFailed,
			wantCount: 1, wantUID: "123"},
	}
}

func TestCountingRules(t *testing.T) {
	for _, c := range countRows() {
		t.Run(c.rule+" "+c.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0())
			tr := Tracker{Clock: clk, Rand: rand.New(rand.NewPCG(5, 5))}
			var oldRetry *metav1.Time
			if sf := c.vm.Status.StartFailure; sf != nil {
				oldRetry = sf.RetryAfterTimestamp.DeepCopy()
			}
			if c.before != nil {
				tr.Sync(c.vm, c.before, nil)
			}
			ch := tr.Sync(c.vm, c.vmi, nil)
			sf := c.vm.Status.StartFailure
			switch {
			case c.wantCount == 0 && sf != nil:
				t.Fatalf("record %+v, want none", sf)
			case c.wantCount == 0:
			case sf == nil:
				t.Fatalf("no record, want count %d", c.wantCount)
			case sf.ConsecutiveFailCount != c.wantCount || sf.LastFailedVMIUID != c.wantUID || sf.RetryAfterTimestamp == nil:
				t.Fatalf("record %+v, want count %d uid %q with a retry time", sf, c.wantCount, c.wantUID)
			default:
				redrawn := oldRetry == nil || !sf.RetryAfterTimestamp.Equal(oldRetry)
				if redrawn != c.newRetry || ch.Counted != c.newRetry {
					t.Fatalf("retry time redrawn=%v counted=%v, want %v", redrawn, ch.Counted, c.newRetry)
				}
				if c.newRetry && !sf.RetryAfterTimestamp.Time.Equal(clk.Now().Add(ch.ScaledDelay)) {
					t.Fatalf("retry time %s, want now + %s", sf.RetryAfterTimestamp.Time, ch.ScaledDelay)
				}
			}
			st := NextStep(c.vm, c.vmi, clk.Now())
			if st.DeleteVMI != c.deleteVMI || st.AddStartRequest != c.addRequest {
				t.Fatalf("NextStep = %+v, want DeleteVMI=%v AddStartRequest=%v", st, c.deleteVMI, c.addRequest)
			}
		})
	}
}

// printableRow is one VM state and the printable status it shows.
type printableRow struct {
	rule     string
	fromCode bool
	strategy v1.VirtualMachineRunStrategy
	count    int
	vmi      *v1.VirtualMachineInstance
	exp      Expectations
	want     v1.VirtualMachinePrintableStatus
}

func printableRows() []printableRow {
	running := newVMI("r", phaseAt{v1.Running, 0})
	failed := newVMI("f", phaseAt{v1.Failed, 0})
	const crash = v1.VirtualMachineStatusCrashLoopBackOff
	return []printableRow{
		{rule: "D1", strategy: v1.RunStrategyAlways, count: 1, want: crash},
		{rule: "D2", strategy: v1.RunStrategyRerunOnFailure, count: 1, want: crash},
		{rule: "D3", strategy: v1.RunStrategyHalted, count: 1, want: v1.VirtualMachineStatusStopped},
		{rule: "D4", strategy: v1.RunStrategyManual, count: 1, want: v1.VirtualMachineStatusStopped},
		{rule: "D5", strategy: v1.RunStrategyOnce, count: 1, vmi: running, want: v1.VirtualMachineStatusRunning},
		{rule: "D6", strategy: v1.RunStrategyAlways, count: 1, vmi: running, want: v1.VirtualMachineStatusRunning},
		{rule: "D7", fromCode: true, strategy: v1.RunStrategyOnce, count: 1, want: crash},
		{rule: "D8", fromCode: true, strategy: v1.RunStrategyOnce, count: 1, vmi: failed, want: crash},
		{rule: "D9", fromCode: true, strategy: v1.RunStrategyAlways, count: 1, vmi: failed, want: crash},
		{rule: "D10", fromCode: true, strategy: v1.RunStrategyAlways, count: 1, exp: Expectations{StartPending: true}, want: v1.VirtualMachineStatusStarting},
		{rule: "D11", fromCode: true, strategy: v1.RunStrategyAlways, count: 1, vmi: newVMI("p", phaseAt{v1.Pending, 0}), want: v1.VirtualMachineStatusStarting},
		{rule: "D11", fromCode: true, strategy: v1.RunStrategyAlways, count: 1, vmi: newVMI("p", phaseAt{v1.Scheduling, 0}), want: v1.VirtualMachineStatusStarting},
		{rule: "D11", fromCode: true, strategy: v1.RunStrategyAlways, count: 1, vmi: newVMI("p", phaseAt{v1.Scheduled, 0}), want: v1.VirtualMachineStatusStarting},
		{rule: "D12", fromCode: true, strategy: v1.RunStrategyRerunOnFailure, count: 1, vmi: newVMI("s", phaseAt{v1.Succeeded, 0}), want: crash},
		{rule: "D13", fromCode: true, strategy: v1.RunStrategyAlways, count: 0, want: v1.VirtualMachineStatusStopped},
	}
}

func TestPrintableStatusRules(t *testing.T) {
	for _, c := range printableRows() {
		vm := newVM(c.strategy)
		if c.count > 0 {
			(&record{count: c.count, retryIn: 300 * time.Second}).set(vm)
		}
		if got := PrintableStatus(vm, c.vmi, c.exp); got != c.want {
			t.Errorf("%s: %s, count %d, VMI %v: PrintableStatus = %s, want %s", c.rule, c.strategy, c.count, phaseOf(c.vmi), got, c.want)
		}
	}
}

func phaseOf(vmi *v1.VirtualMachineInstance) string {
	if vmi == nil {
		return "none"
	}
	return string(vmi.Status.Phase)
}

// stepRow is one reconcile of syncRunStrategy.
type stepRow struct {
	rule     string
	fromCode bool
	name     string
	vm       *v1.VirtualMachine
	vmi      *v1.VirtualMachineInstance
	want     Step // Reason is not compared
}

func stepRows() []stepRow {
	start := []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}
	vm := func(s v1.VirtualMachineRunStrategy, retryIn time.Duration, reqs []v1.VirtualMachineStateChangeRequest) *v1.VirtualMachine {
		m := (&record{count: 1, uid: "a", retryIn: retryIn}).set(newVM(s))
		m.Status.StateChangeRequests = reqs
		m.Status.RunStrategy = s
		return m
	}
	fresh := newVM(v1.RunStrategyRerunOnFailure)
	deleting := newVMI("d", phaseAt{v1.Failed, 0})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0()}
	return []stepRow{
		{rule: "S1", fromCode: true, name: "Always waits despite a start request", vm: vm(v1.RunStrategyAlways, 40*time.Second, start), want: Step{Wait: 40 * time.Second}},
		{rule: "S1", fromCode: true, name: "Always starts once the backoff is over", vm: vm(v1.RunStrategyAlways, 0, nil), want: Step{StartVMI: true}},
		{rule: "S2", fromCode: true, name: "RerunOnFailure waits with its start request", vm: vm(v1.RunStrategyRerunOnFailure, 40*time.Second, start), want: Step{Wait: 40 * time.Second}},
		{rule: "S2", fromCode: true, name: "RerunOnFailure starts after the backoff", vm: vm(v1.RunStrategyRerunOnFailure, -time.Second, start), want: Step{StartVMI: true}},
		{rule: "S2", fromCode: true, name: "RerunOnFailure: a VMI already being deleted is left alone", vm: vm(v1.RunStrategyRerunOnFailure, 0, nil), vmi: deleting},
		{rule: "S3", fromCode: true, name: "RerunOnFailure without a request stays stopped", vm: vm(v1.RunStrategyRerunOnFailure, 0, nil)},
		{rule: "S3", fromCode: true, name: "RerunOnFailure never started yet starts", vm: fresh, want: Step{StartVMI: true}},
		{rule: "S4", fromCode: true, name: "Halted with a start request turns Always", vm: vm(v1.RunStrategyHalted, 40*time.Second, start), want: Step{SetRunStrategy: v1.RunStrategyAlways}},
		{rule: "S5", fromCode: true, name: "Once starts without a backoff check", vm: vm(v1.RunStrategyOnce, 40*time.Second, nil), want: Step{StartVMI: true}},
		{rule: "S5", fromCode: true, name: "Once never deletes its VMI", vm: vm(v1.RunStrategyOnce, 40*time.Second, nil), vmi: newVMI("o", phaseAt{v1.Failed, 0})},
	}
}

func TestRunStrategyRules(t *testing.T) {
	for _, c := range stepRows() {
		got := NextStep(c.vm, c.vmi, t0())
		got.Reason = ""
		if got != c.want {
			t.Errorf("%s %s: NextStep = %+v, want %+v", c.rule, c.name, got, c.want)
		}
	}
}

// trimRow is one first state-change request and whether it is done.
type trimRow struct {
	rule     string
	fromCode bool
	req      v1.VirtualMachineStateChangeRequest
	vmi      *v1.VirtualMachineInstance
	trim     bool
}

func trimRows() []trimRow {
	uid := types.UID("v")
	other := types.UID("w")
	live := newVMI(uid, phaseAt{v1.Scheduled, 0})
	failed := newVMI(uid, phaseAt{v1.Failed, 0})
	stop := func(u *types.UID) v1.VirtualMachineStateChangeRequest {
		return v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: u}
	}
	start := v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest}
	return []trimRow{
		{rule: "S6", fromCode: true, req: start, vmi: nil, trim: false},
		{rule: "S6", fromCode: true, req: start, vmi: failed, trim: false},
		{rule: "S6", fromCode: true, req: start, vmi: live, trim: true},
		{rule: "S6", fromCode: true, req: stop(&uid), vmi: nil, trim: true},
		{rule: "S6", fromCode: true, req: stop(&uid), vmi: live, trim: false},
		{rule: "S6", fromCode: true, req: stop(&other), vmi: live, trim: true},
		{rule: "S6", fromCode: true, req: stop(nil), vmi: live, trim: true},
	}
}

func TestTrimFirstRequestRules(t *testing.T) {
	for i, c := range trimRows() {
		vm := newVM(v1.RunStrategyRerunOnFailure)
		vm.Status.StateChangeRequests = []v1.VirtualMachineStateChangeRequest{c.req}
		if got := TrimFirstRequest(vm, c.vmi); got != c.trim {
			t.Errorf("%s row %d: %s request, VMI %s: TrimFirstRequest = %v, want %v", c.rule, i, c.req.Action, phaseOf(c.vmi), got, c.trim)
		}
	}
	if TrimFirstRequest(newVM(v1.RunStrategyAlways), nil) {
		t.Error("TrimFirstRequest with no requests = true")
	}
}

// statusStrategyRow is when status.runStrategy is filled in.
type statusStrategyRow struct {
	rule      string
	fromCode  bool
	before    v1.VirtualMachineRunStrategy
	vmiExists bool
	want      v1.VirtualMachineRunStrategy
}

func statusStrategyRows() []statusStrategyRow {
	return []statusStrategyRow{
		{rule: "S7", fromCode: true, before: "", vmiExists: false, want: ""},
		{rule: "S7", fromCode: true, before: "", vmiExists: true, want: v1.RunStrategyAlways},
		{rule: "S7", fromCode: true, before: v1.RunStrategyHalted, vmiExists: false, want: v1.RunStrategyAlways},
	}
}

func TestStatusRunStrategyRules(t *testing.T) {
	for _, c := range statusStrategyRows() {
		vm := newVM(v1.RunStrategyAlways)
		vm.Status.RunStrategy = c.before
		if got := StatusRunStrategy(vm, c.vmiExists); got != c.want {
			t.Errorf("%s: status %q, VMI exists %v: StatusRunStrategy = %q, want %q", c.rule, c.before, c.vmiExists, got, c.want)
		}
	}
}

// tableRule is a row's rule and whether it says it is read from code.
type tableRule struct {
	rule     string
	fromCode bool
}

// tableRules lists every table row's rule. Each row type has the fields
// rule and fromCode; reading them by reflection keeps this list from
// repeating itself per table.
func tableRules() []tableRule {
	tables := []any{curveRows(), distributionRows(), timeLeftRows(), countRows(),
		printableRows(), stepRows(), trimRows(), statusStrategyRows()}
	var out []tableRule
	for _, table := range tables {
		rows := reflect.ValueOf(table)
		for i := range rows.Len() {
			row := rows.Index(i)
			out = append(out, tableRule{rule: row.FieldByName("rule").String(), fromCode: row.FieldByName("fromCode").Bool()})
		}
	}
	// B8 (the retry time written) is checked in TestCountingRules.
	out = append(out, tableRule{rule: "B8", fromCode: true})
	// S8 and S9 are the controller's (launcher phases, launcher creation
	// retries): pkg/controller's TestLauncherThatCannotStartStaysPendingUncounted
	// and TestFailFastPhases check them.
	out = append(out, tableRule{rule: "S8", fromCode: true}, tableRule{rule: "S9", fromCode: true})
	// H1 to H5 are the node side's under KubeVirt's virt-handler: the
	// cluster lane's functests/cluster/virthandler_restart_test.go,
	// virthandler_start_test.go, virthandler_socket_test.go and
	// virthandler_nosocket_test.go check them.
	for _, id := range []string{"H1", "H2", "H3", "H4", "H5"} {
		out = append(out, tableRule{rule: id, fromCode: true})
	}
	return out
}

func TestEveryRuleHasARow(t *testing.T) {
	rules := map[string]FidelityRule{}
	for _, r := range FidelityRules() {
		if _, dup := rules[r.ID]; dup {
			t.Errorf("rule %s listed twice", r.ID)
		}
		rules[r.ID] = r
	}
	covered := map[string]bool{}
	for _, tr := range tableRules() {
		r, ok := rules[tr.rule]
		if !ok {
			t.Errorf("a table row names rule %s, which FidelityRules does not list", tr.rule)
			continue
		}
		// A rule upstream tests may have extra rows read from code, not
		// the other way round.
		if r.FromCode && !tr.fromCode {
			t.Errorf("rule %s is read from code but a row says upstream tests it", tr.rule)
		}
		covered[tr.rule] = true
	}
	for _, r := range FidelityRules() {
		if !covered[r.ID] {
			t.Errorf("rule %s (%s) has no table row", r.ID, r.Rule)
		}
		if r.Deviation == "" && r.Upstream != r.Ours {
			t.Errorf("rule %s says same but upstream %q and ours %q differ", r.ID, r.Upstream, r.Ours)
		}
	}
}

func TestFailedCreateCondition(t *testing.T) {
	c := FailedCreateCondition(errors.New("boom"), t0())
	if c.Type != v1.VirtualMachineInstanceSynchronized || c.Status != "False" || c.Reason != "FailedCreate" ||
		c.Message != "failed to create virtual machine pod: boom" || !c.LastTransitionTime.Time.Equal(t0()) {
		t.Fatalf("FailedCreateCondition = %+v", c)
	}
}

func TestFidelityMarkdown(t *testing.T) {
	md := FidelityMarkdown([]FidelityRule{
		{ID: "X1", Rule: "a | b", Upstream: "u", Ours: "o", Deviation: "named"},
		{ID: "X2", Rule: "c", Upstream: "s", Ours: "s", FromCode: true},
	})
	want := "| Rule | Situation | KubeVirt v1.6.0 | Ours | Verdict |\n" +
		"|---|---|---|---|---|\n" +
		"| X1 | a \\| b | u | o | named |\n" +
		"| X2 (code) | c | s | s | same |\n"
	if md != want {
		t.Fatalf("FidelityMarkdown =\n%s\nwant\n%s", md, want)
	}
	if full := FidelityMarkdown(FidelityRules()); strings.Count(full, "\n") != len(FidelityRules())+2 {
		t.Fatalf("full table has %d lines for %d rules", strings.Count(full, "\n"), len(FidelityRules()))
	}
}
