package vmops

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

// t0 is the fake clock's time; retry times are offsets from it.
func t0() time.Time { return time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC) }

// vmOpt changes a test VM.
type vmOpt func(*v1.VirtualMachine)

func newVM(s v1.VirtualMachineRunStrategy, opts ...vmOpt) *v1.VirtualMachine {
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default"}}
	vm.Spec.RunStrategy = &s
	vm.Spec.Template = &v1.VirtualMachineInstanceTemplateSpec{}
	for _, o := range opts {
		o(vm)
	}
	return vm
}

// running makes the VM use spec.running instead of spec.runStrategy.
func running(r bool) vmOpt {
	return func(vm *v1.VirtualMachine) { vm.Spec.RunStrategy, vm.Spec.Running = nil, &r }
}

// alsoRunning sets spec.running next to spec.runStrategy (invalid).
func alsoRunning(vm *v1.VirtualMachine) { r := true; vm.Spec.Running = &r }

// inBackoff gives the VM a start-failure record whose retry is 40 s away.
func inBackoff(vm *v1.VirtualMachine) {
	rt := metav1.NewTime(t0().Add(40 * time.Second))
	vm.Status.StartFailure = &v1.VirtualMachineStartFailure{ConsecutiveFailCount: 2, LastFailedVMIUID: "old", RetryAfterTimestamp: &rt}
}

// pendingStart is the {action: Start} the controller adds for
// RerunOnFailure after a Failed VMI.
func pendingStart(vm *v1.VirtualMachine) {
	vm.Status.StateChangeRequests = []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}
}

func condition(t v1.VirtualMachineConditionType) vmOpt {
	return func(vm *v1.VirtualMachine) {
		vm.Status.Conditions = append(vm.Status.Conditions, v1.VirtualMachineCondition{Type: t, Status: k8sv1.ConditionTrue})
	}
}

func newVMI(uid types.UID, phase v1.VirtualMachineInstancePhase, grace *int64) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default", UID: uid}}
	vmi.Status.Phase = phase
	vmi.Spec.TerminationGracePeriodSeconds = grace
	return vmi
}

func i64(v int64) *int64 { return &v }

func strategy(s v1.VirtualMachineRunStrategy) *v1.VirtualMachineRunStrategy { return &s }

func boolp(b bool) *bool { return &b }

// want is one expected outcome.
type want struct {
	code  int
	msg   string
	patch Patch
}

// opRow is one manual operation on one VM state.
type opRow struct {
	rule     string
	fromCode bool
	name     string
	op       Op
	vm       *v1.VirtualMachine
	vmi      *v1.VirtualMachineInstance
	start    *v1.StartOptions
	stop     *v1.StopOptions
	restart  *v1.RestartOptions
	want     want  // KubeVirt v1.6.0
	ours     *want // Ours, when it differs
}

func opRows() []opRow {
	always, rerun, manual := v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure, v1.RunStrategyManual
	halted, once, waitRcv := v1.RunStrategyHalted, v1.RunStrategyOnce, v1.RunStrategyWaitAsReceiver
	uid := types.UID("vmi-1")
	stopReq := v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid}
	startReq := v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest}
	pausedReq := v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest, Data: map[string]string{"paused": "true"}}
	requests := func(rs ...v1.VirtualMachineStateChangeRequest) Patch {
		return Patch{SetRequests: true, StateChangeRequests: rs}
	}
	clearing := func(p Patch) Patch { p.RemoveStartFailure = true; return p }
	ok := func(p Patch) want { return want{code: http.StatusAccepted, patch: p} }
	conflict := func(msg string) want { return want{code: http.StatusConflict, msg: msg} }
	internal := func(msg string) want { return want{code: http.StatusInternalServerError, msg: msg} }
	vmi := func(p v1.VirtualMachineInstancePhase) *v1.VirtualMachineInstance { return newVMI(uid, p, nil) }
	graceVMI := func(g *int64) *v1.VirtualMachineInstance { return newVMI(uid, v1.Running, g) }
	stopWith := func(g int64) *v1.StopOptions { return &v1.StopOptions{GracePeriod: i64(g)} }
	halt := Patch{RunStrategy: strategy(halted)}
	const recovery = "VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; manual intervention is needed to reassign them to their original volumes."
	const underway = "unable to complete request: stop/start already underway"
	const exclusive = "running and runstrategy are mutually exclusive"
	stopRerunOurs := &want{code: http.StatusAccepted, patch: Patch{RunStrategy: strategy(halted), SetRequests: true, RemoveStartFailure: true}}

	return []opRow{
		// start
		{rule: "E1", name: "Always, no VMI", op: OpStart, vm: newVM(always), want: conflict("Always does not support manual start requests")},
		{rule: "E1", fromCode: true, name: "Always in backoff", op: OpStart, vm: newVM(always, inBackoff), want: conflict("Always does not support manual start requests")},
		{rule: "E2", name: "Always, Running VMI", op: OpStart, vm: newVM(always), vmi: vmi(v1.Running), want: conflict("VM is already running")},
		{rule: "E3", name: "Once, no VMI", op: OpStart, vm: newVM(once), want: conflict("Once does not support manual start requests")},
		{rule: "E4", name: "RerunOnFailure, Failed VMI", op: OpStart, vm: newVM(rerun), vmi: vmi(v1.Failed), want: conflict("RerunOnFailure does not support starting VM from failed state")},
		{rule: "E5", name: "RerunOnFailure, Succeeded VMI", op: OpStart, vm: newVM(rerun), vmi: vmi(v1.Succeeded), want: ok(requests(stopReq, startReq))},
		{rule: "E6", name: "Manual, Succeeded VMI", op: OpStart, vm: newVM(manual), vmi: vmi(v1.Succeeded), want: ok(requests(stopReq, startReq))},
		{rule: "E6", name: "Manual, Failed VMI", op: OpStart, vm: newVM(manual), vmi: vmi(v1.Failed), want: ok(requests(stopReq, startReq))},
		{rule: "E7", fromCode: true, name: "Halted, no VMI, record kept", op: OpStart, vm: newVM(halted, inBackoff), want: ok(Patch{RunStrategy: strategy(always)})},
		{rule: "E7", fromCode: true, name: "running: false, no VMI", op: OpStart, vm: newVM(halted, running(false)), want: ok(Patch{Running: boolp(true)})},
		{rule: "E8", name: "running: false, paused", op: OpStart, vm: newVM(halted, running(false)), vmi: vmi(v1.VmPhaseUnset), start: &v1.StartOptions{Paused: true}, want: ok(requests(pausedReq))},
		{rule: "E8", name: "RerunOnFailure, Succeeded VMI, paused", op: OpStart, vm: newVM(rerun), vmi: vmi(v1.Succeeded), start: &v1.StartOptions{Paused: true}, want: ok(requests(stopReq, pausedReq))},
		{rule: "E9", fromCode: true, name: "RerunOnFailure in backoff with its {Start}", op: OpStart, vm: newVM(rerun, inBackoff, pendingStart), want: internal(underway)},
		{rule: "E10", fromCode: true, name: "Manual, no VMI, record removed", op: OpStart, vm: newVM(manual, inBackoff), want: ok(clearing(requests(startReq)))},
		{rule: "E10", fromCode: true, name: "RerunOnFailure, no VMI, no request", op: OpStart, vm: newVM(rerun, inBackoff), want: ok(clearing(requests(startReq)))},
		{rule: "E11", fromCode: true, name: "Always, Pending VMI", op: OpStart, vm: newVM(always), vmi: vmi(v1.Pending), want: conflict("VM is already running")},
		{rule: "E11", fromCode: true, name: "Manual, Scheduled VMI", op: OpStart, vm: newVM(manual), vmi: vmi(v1.Scheduled), want: conflict("VM is already running")},
		{rule: "E11", fromCode: true, name: "Manual, VMI in phase Unknown goes on", op: OpStart, vm: newVM(manual), vmi: vmi(v1.Unknown), want: ok(requests(startReq))},
		{rule: "E12", name: "ManualRecoveryRequired", op: OpStart, vm: newVM(manual, condition(v1.VirtualMachineManualRecoveryRequired)), vmi: vmi(v1.Failed), want: conflict(recovery)},
		{rule: "E13", fromCode: true, name: "start, both fields", op: OpStart, vm: newVM(always, alsoRunning), want: internal(exclusive)},
		{rule: "E13", fromCode: true, name: "stop, both fields", op: OpStop, vm: newVM(always, alsoRunning), want: internal(exclusive)},
		{rule: "E13", fromCode: true, name: "restart, both fields", op: OpRestart, vm: newVM(always, alsoRunning), vmi: vmi(v1.Running), want: internal(exclusive)},

		// stop
		{rule: "E14", name: "Always, no VMI", op: OpStop, vm: newVM(always), want: ok(halt)},
		{rule: "E14", fromCode: true, name: "Always in backoff: only the strategy", op: OpStop, vm: newVM(always, inBackoff), want: ok(halt)},
		{rule: "E14", fromCode: true, name: "running: true, no VMI", op: OpStop, vm: newVM(always, running(true)), want: ok(Patch{Running: boolp(false)})},
		{rule: "E15", name: "Once, no VMI", op: OpStop, vm: newVM(once), want: ok(halt)},
		{rule: "E16", name: "RerunOnFailure, no VMI", op: OpStop, vm: newVM(rerun), want: conflict("VM is not running"),
			ours: &want{code: http.StatusAccepted, patch: Patch{RunStrategy: strategy(halted), SetRequests: true}}},
		{rule: "E16", fromCode: true, name: "RerunOnFailure in backoff with its {Start}", op: OpStop, vm: newVM(rerun, inBackoff, pendingStart), want: conflict("VM is not running"), ours: stopRerunOurs},
		{rule: "E16", fromCode: true, name: "RerunOnFailure, Failed VMI not yet deleted", op: OpStop, vm: newVM(rerun, inBackoff, pendingStart), vmi: vmi(v1.Failed), want: conflict("VM is not running"), ours: stopRerunOurs},
		{rule: "E17", name: "Manual, no VMI", op: OpStop, vm: newVM(manual), want: conflict("VM is not running")},
		{rule: "E18", name: "Halted, no VMI", op: OpStop, vm: newVM(halted), want: conflict("VM is not running")},
		{rule: "E19", name: "Halted, VMI Unknown", op: OpStop, vm: newVM(halted), vmi: vmi(v1.Unknown), want: conflict("Halted only supports manual stop requests with a shorter graceperiod")},
		{rule: "E20", name: "no grace period", op: OpStop, vm: newVM(halted), vmi: graceVMI(i64(1800)), want: conflict("Halted only supports manual stop requests with a shorter graceperiod")},
		{rule: "E20", name: "equal grace period", op: OpStop, vm: newVM(halted), vmi: graceVMI(i64(1800)), stop: stopWith(1800),
			want: want{code: http.StatusConflict, msg: "Halted only supports manual stop requests with a shorter graceperiod", patch: Patch{VMIGracePeriodSeconds: i64(1800)}}},
		{rule: "E20", name: "greater grace period", op: OpStop, vm: newVM(halted), vmi: graceVMI(i64(1800)), stop: stopWith(2400),
			want: want{code: http.StatusConflict, msg: "Halted only supports manual stop requests with a shorter graceperiod", patch: Patch{VMIGracePeriodSeconds: i64(2400)}}},
		{rule: "E20", name: "VMI without a grace period", op: OpStop, vm: newVM(halted), vmi: graceVMI(nil), stop: stopWith(1800),
			want: ok(Patch{SetRequests: true, StateChangeRequests: []v1.VirtualMachineStateChangeRequest{stopReq}, VMIGracePeriodSeconds: i64(1800)})},
		{rule: "E20", name: "shorter grace period", op: OpStop, vm: newVM(halted), vmi: graceVMI(i64(1800)), stop: stopWith(800),
			want: ok(Patch{SetRequests: true, StateChangeRequests: []v1.VirtualMachineStateChangeRequest{stopReq}, VMIGracePeriodSeconds: i64(800)})},
		{rule: "E21", name: "Always, Running VMI", op: OpStop, vm: newVM(always), vmi: vmi(v1.Running), want: ok(halt)},
		{rule: "E21", name: "Once, Running VMI", op: OpStop, vm: newVM(once), vmi: vmi(v1.Running), want: ok(halt)},
		{rule: "E21", name: "Manual, Running VMI", op: OpStop, vm: newVM(manual), vmi: vmi(v1.Running), want: ok(requests(stopReq))},
		{rule: "E21", name: "RerunOnFailure, Running VMI", op: OpStop, vm: newVM(rerun), vmi: vmi(v1.Running), want: ok(requests(stopReq))},
		{rule: "E22", fromCode: true, name: "Always, Running VMI, grace 0", op: OpStop, vm: newVM(always, running(true)), vmi: graceVMI(i64(1800)), stop: stopWith(0),
			want: ok(Patch{Running: boolp(false), VMIGracePeriodSeconds: i64(0)})},
		{rule: "E22", fromCode: true, name: "Always, Failed VMI, grace 0: no VMI patch", op: OpStop, vm: newVM(always, running(true)), vmi: vmi(v1.Failed), stop: stopWith(0),
			want: ok(Patch{Running: boolp(false)})},
		{rule: "E23", name: "Manual, Running VMI, {Start} pending", op: OpStop, vm: newVM(manual, pendingStart), vmi: vmi(v1.Running), want: ok(requests(stopReq))},
		{rule: "E24", fromCode: true, name: "stop request removes the record", op: OpStop, vm: newVM(rerun, inBackoff), vmi: vmi(v1.Running), want: ok(clearing(requests(stopReq)))},
		{rule: "E24", fromCode: true, name: "restart request removes the record", op: OpRestart, vm: newVM(always, inBackoff), vmi: vmi(v1.Failed), want: ok(clearing(requests(stopReq, startReq)))},

		// restart
		{rule: "E25", name: "Always, no VMI", op: OpRestart, vm: newVM(always, inBackoff), want: conflict("VM is not running: Halted")},
		{rule: "E25", name: "Manual, no VMI", op: OpRestart, vm: newVM(manual), want: conflict("VM is not running: Halted")},
		{rule: "E25", name: "RerunOnFailure, no VMI", op: OpRestart, vm: newVM(rerun, inBackoff, pendingStart), want: conflict("VM is not running: Halted")},
		{rule: "E26", name: "Once, no VMI", op: OpRestart, vm: newVM(once), want: conflict("RunStategy Once does not support manual restart requests")},
		{rule: "E26", fromCode: true, name: "Once, Failed VMI", op: OpRestart, vm: newVM(once), vmi: vmi(v1.Failed), want: conflict("RunStategy Once does not support manual restart requests")},
		{rule: "E27", name: "Halted", op: OpRestart, vm: newVM(halted), want: conflict("RunStategy Halted does not support manual restart requests")},
		{rule: "E27", name: "running: false", op: OpRestart, vm: newVM(halted, running(false)), want: conflict("RunStategy Halted does not support manual restart requests")},
		{rule: "E28", name: "Always, Failed VMI", op: OpRestart, vm: newVM(always), vmi: vmi(v1.Failed), want: ok(requests(stopReq, startReq))},
		{rule: "E28", name: "Manual, Failed VMI", op: OpRestart, vm: newVM(manual), vmi: vmi(v1.Failed), want: ok(requests(stopReq, startReq))},
		{rule: "E28", name: "RerunOnFailure, Failed VMI", op: OpRestart, vm: newVM(rerun), vmi: vmi(v1.Failed), want: ok(requests(stopReq, startReq))},
		{rule: "E29", name: "{Start} pending", op: OpRestart, vm: newVM(always, pendingStart), vmi: vmi(v1.Running), want: internal(underway)},
		{rule: "E30", fromCode: true, name: "grace 5", op: OpRestart, vm: newVM(always), vmi: vmi(v1.Running), restart: &v1.RestartOptions{GracePeriodSeconds: i64(5)},
			want: want{code: http.StatusBadRequest, msg: "For force restart, only gracePeriod=0 is supported for now"}},
		{rule: "E30", fromCode: true, name: "grace -1", op: OpRestart, vm: newVM(always), vmi: vmi(v1.Running), restart: &v1.RestartOptions{GracePeriodSeconds: i64(-1)},
			want: want{code: http.StatusBadRequest, msg: "gracePeriod has to be greater or equal to 0"}},
		{rule: "E31", name: "grace 0", op: OpRestart, vm: newVM(always, running(true)), vmi: vmi(v1.Running), restart: &v1.RestartOptions{GracePeriodSeconds: i64(0)},
			want: ok(Patch{SetRequests: true, StateChangeRequests: []v1.VirtualMachineStateChangeRequest{stopReq, startReq}, DeleteLauncherPod: true})},
		{rule: "E32", name: "VolumesChange", op: OpRestart, vm: newVM(always, condition(v1.VirtualMachineConditionType(v1.VirtualMachineInstanceVolumesChange))), vmi: vmi(v1.Running), want: conflict(recovery)},
		{rule: "E33", fromCode: true, name: "start WaitAsReceiver", op: OpStart, vm: newVM(waitRcv), want: ok(Patch{})},
		{rule: "E33", fromCode: true, name: "stop WaitAsReceiver", op: OpStop, vm: newVM(waitRcv), vmi: vmi(v1.Running), want: ok(Patch{})},
	}
}

func (c opRow) run(r Rules) Outcome {
	vm, vmi := c.vm.DeepCopy(), c.vmi.DeepCopy()
	var o Outcome
	switch c.op {
	case OpStart:
		o = r.Start(vm, vmi, c.start)
	case OpStop:
		o = r.Stop(vm, vmi, c.stop)
	case OpRestart:
		o = r.Restart(vm, vmi, c.restart)
	}
	if !reflect.DeepEqual(vm, c.vm) || !reflect.DeepEqual(vmi, c.vmi) {
		panic("an operation changed its input")
	}
	return o
}

func TestManualOperationRules(t *testing.T) {
	for _, c := range opRows() {
		for _, side := range []struct {
			name  string
			rules Rules
			want  want
		}{{"upstream", Upstream(), c.want}, {"ours", Ours(), oursOf(c)}} {
			o := c.run(side.rules)
			if o.Op != c.op || o.Code != side.want.code || o.Message != side.want.msg || !reflect.DeepEqual(o.Patch, side.want.patch) {
				t.Errorf("%s %s %s (%s): got %d %q %+v, want %d %q %+v",
					c.rule, c.op, c.name, side.name, o.Code, o.Message, o.Patch, side.want.code, side.want.msg, side.want.patch)
			}
			if dev := side.name == "ours" && c.ours != nil; (o.Deviation != "") != dev {
				t.Errorf("%s %s %s (%s): deviation %q", c.rule, c.op, c.name, side.name, o.Deviation)
			}
			if o.Accepted() != (o.Err(c.vm.Name) == nil) {
				t.Errorf("%s %s %s (%s): Accepted %v but Err %v", c.rule, c.op, c.name, side.name, o.Accepted(), o.Err(c.vm.Name))
			}
		}
	}
}

func oursOf(c opRow) want {
	if c.ours != nil {
		return *c.ours
	}
	return c.want
}

func TestErrIsUpstreamsAPIError(t *testing.T) {
	cases := []struct {
		o    Outcome
		code int32
		msg  string
	}{
		{Outcome{Code: http.StatusConflict, Message: "VM is not running"}, 409,
			`Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm": VM is not running`},
		{Outcome{Code: http.StatusInternalServerError, Message: MsgUnderway}, 500,
			"Internal error occurred: unable to complete request: stop/start already underway"},
		{Outcome{Code: http.StatusBadRequest, Message: MsgNegativeGrace}, 400, "gracePeriod has to be greater or equal to 0"},
	}
	for _, c := range cases {
		err := c.o.Err("vm")
		if err == nil || err.ErrStatus.Code != c.code || err.Error() != c.msg {
			t.Errorf("Err = %v, want %d %q", err, c.code, c.msg)
		}
		if c.code == 409 && !apierrors.IsConflict(err) {
			t.Errorf("Err(%q) is not a conflict", c.msg)
		}
	}
	if err := (Outcome{Code: http.StatusAccepted}).Err("vm"); err != nil {
		t.Errorf("Err of an accepted outcome = %v", err)
	}
}

// TestStopDuringRerunOnFailureBackoff follows a RerunOnFailure VM through
// its backoff with both rule sets, with pkg/backoff's reconcile rules and a
// fake clock: upstream refuses the stop and the VM starts again when the
// backoff ends; ours stops it for good.
func TestStopDuringRerunOnFailureBackoff(t *testing.T) {
	for _, c := range []struct {
		rules     Rules
		accepted  bool
		wantStart bool
	}{{Upstream(), false, true}, {Ours(), true, false}} {
		clk := clocktesting.NewFakeClock(t0())
		tr := backoff.Tracker{Clock: clk, Rand: fixedRand(0)}
		vm := newVM(v1.RunStrategyRerunOnFailure)
		vm.Status.RunStrategy = v1.RunStrategyRerunOnFailure
		failed := newVMI("vmi-1", v1.Failed, nil)
		tr.Sync(vm, failed, nil)
		step := backoff.NextStep(vm, failed, clk.Now())
		if !step.DeleteVMI || !step.AddStartRequest {
			t.Fatalf("after a Failed VMI: %+v, want the VMI deleted and {Start} added", step)
		}
		vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
		if got := backoff.PrintableStatus(vm, nil, backoff.Expectations{}); got != v1.VirtualMachineStatusCrashLoopBackOff {
			t.Fatalf("printable status in backoff = %s", got)
		}
		if o := c.rules.Start(vm, nil, nil); o.Code != http.StatusInternalServerError || o.Message != MsgUnderway {
			t.Fatalf("start in backoff = %s, want 500 %q", o, MsgUnderway)
		}
		o := c.rules.Stop(vm, nil, nil)
		if o.Accepted() != c.accepted {
			t.Fatalf("stop in backoff = %s, want accepted=%v", o, c.accepted)
		}
		o.Patch.Apply(vm, nil)
		tr.Sync(vm, nil, nil)
		clk.Step(10 * time.Second) // the whole backoff for the first failure
		step = backoff.NextStep(vm, nil, clk.Now())
		if step.StartVMI != c.wantStart {
			t.Fatalf("%+v after the backoff: %+v, want StartVMI=%v", c.rules, step, c.wantStart)
		}
		if !c.wantStart && (vm.Status.StartFailure != nil || len(vm.Status.StateChangeRequests) != 0 || step.SetRunStrategy != "") {
			t.Fatalf("after our stop: record %+v, requests %+v, step %+v", vm.Status.StartFailure, vm.Status.StateChangeRequests, step)
		}
	}
}

// fixedRand always draws n.
type fixedRand int

func (f fixedRand) IntN(int) int { return int(f) }

func TestPatchApply(t *testing.T) {
	vm := newVM(v1.RunStrategyRerunOnFailure, inBackoff, pendingStart)
	vmi := newVMI("u", v1.Running, i64(30))
	Patch{RunStrategy: strategy(v1.RunStrategyHalted), SetRequests: true, RemoveStartFailure: true, VMIGracePeriodSeconds: i64(0)}.Apply(vm, vmi)
	if *vm.Spec.RunStrategy != v1.RunStrategyHalted || vm.Status.StartFailure != nil || len(vm.Status.StateChangeRequests) != 0 ||
		vm.Generation != 1 || *vmi.Spec.TerminationGracePeriodSeconds != 0 {
		t.Fatalf("after Apply: spec %+v status %+v generation %d grace %d", vm.Spec.RunStrategy, vm.Status, vm.Generation, *vmi.Spec.TerminationGracePeriodSeconds)
	}
	if !(Patch{}).IsZero() || (Patch{DeleteLauncherPod: true}).IsZero() {
		t.Fatal("IsZero")
	}
}

func TestDo(t *testing.T) {
	vm := newVM(v1.RunStrategyAlways)
	for _, op := range []Op{OpStart, OpStop, OpRestart} {
		o, err := Ours().Do(op, vm, nil)
		if err != nil || o.Op != op {
			t.Fatalf("Do(%s) = %v, %v", op, o, err)
		}
	}
	if _, err := Ours().Do("pause", vm, nil); err == nil || !strings.Contains(err.Error(), `"pause"`) {
		t.Fatalf("Do(pause) error = %v", err)
	}
}

func TestEveryManualRuleHasARow(t *testing.T) {
	rows := map[string]bool{}
	tested := map[string]bool{}
	for _, c := range opRows() {
		rows[c.rule] = true
		if !c.fromCode {
			tested[c.rule] = true
		}
	}
	for _, r := range manualRules() {
		if !rows[r.ID] {
			t.Errorf("rule %s (%s) has no row", r.ID, r.Rule)
		}
		if r.FromCode && tested[r.ID] {
			t.Errorf("rule %s is read from code but a row says upstream tests it", r.ID)
		}
		if (r.Deviation != "") != (r.Upstream != r.Ours) {
			t.Errorf("rule %s: deviation %q with upstream %q, ours %q", r.ID, r.Deviation, r.Upstream, r.Ours)
		}
	}
	for id := range rows {
		if !strings.HasPrefix(id, "E") {
			t.Errorf("row names rule %s outside section E", id)
		}
	}
	md := FidelityMarkdown()
	for _, want := range []string{"| E16 | stop: RerunOnFailure", DeviationStopRerunOnFailure, "| A1 |", backoff.DeviationExactTime} {
		if !strings.Contains(md, want) {
			t.Errorf("FidelityMarkdown lacks %q", want)
		}
	}
}
