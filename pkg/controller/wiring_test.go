package controller

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	k8score "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/vmops"
)

// The wiring of pkg/backoff's NextStep and pkg/vmops's rules into the
// worker, driven on the worker's own methods with a fake clock and a
// runtime that cannot start launchers: every start is a launcher that
// cannot be created.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// wiringWorker is a worker of one VM with the given run strategy, not
// running its loop.
func wiringWorker(t *testing.T, strategy v1.VirtualMachineRunStrategy) (*worker, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	store, err := OpenStore(filepath.Join(t.TempDir(), "state"), false)
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{
		cfg: Config{
			Launcher:     LauncherOptions{Path: "virt-launcher"},
			Policy:       backoff.Policy{Scale: 1},
			StartTimeout: launcherapi.FixedStartTimeout(time.Second),
			KillMargin:   time.Second, Seed: 7,
		},
		clock: clk, log: slog.New(slog.DiscardHandler), store: store, workers: map[Key]*worker{},
		rt: &fakeRuntime{clock: clk, startErr: errors.New("starting virt-launcher: exec: no such file or directory")},
	}
	s := strategy
	vm := &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default", UID: "vm-uid", Generation: 1},
		Spec:       v1.VirtualMachineSpec{RunStrategy: &s, Template: &v1.VirtualMachineInstanceTemplateSpec{}},
	}
	w := newWorker(c, &Record{VM: vm})
	w.watchCtx = context.Background()
	return w, clk
}

// inBackoff puts the VM where a crash loop leaves it: two counted
// failures, the retry a minute ahead, the failed VMI deleted (kept for
// Once, which never deletes it), RerunOnFailure's {action: Start}
// pending.
func inBackoff(w *worker) {
	vm := w.rec.VM
	strategy := mustStrategy(vm)
	retry := metav1.NewTime(t0.Add(time.Minute))
	vm.Status.StartFailure = &v1.VirtualMachineStartFailure{ConsecutiveFailCount: 2, LastFailedVMIUID: "failed-uid", RetryAfterTimestamp: &retry}
	vm.Status.RunStrategy = strategy
	switch strategy {
	case v1.RunStrategyRerunOnFailure:
		vm.Status.StateChangeRequests = []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}
	case v1.RunStrategyOnce, v1.RunStrategyManual:
		w.rec.VMI = failedVMI("failed-uid")
	}
}

// do sends op to the worker as the control socket does and returns its
// answer, after the settle that follows it.
func do(w *worker, op string) error {
	reply := make(chan commandResult, 1)
	w.handle(command{op: op, reply: reply})
	w.settle()
	return (<-reply).err
}

func failedVMI(uid types.UID) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default", UID: uid}}
	setPhase(vmi, v1.Pending, t0.Add(-time.Second))
	setPhase(vmi, v1.Failed, t0.Add(-time.Second))
	return vmi
}

func TestManualOperationsDuringBackoff(t *testing.T) {
	const (
		alwaysStart = `Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm": Always does not support manual start requests`
		onceStart   = `Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm": Once does not support manual start requests`
		notRunning  = `Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm": VM is not running`
		underway    = `unable to complete request: stop/start already underway`
		onceRestart = `RunStategy Once does not support manual restart requests`
	)
	for _, tc := range []struct {
		strategy v1.VirtualMachineRunStrategy
		op       string
		refused  string // a substring of the refusal, empty when accepted
		// after an accepted operation and the reconcile that follows:
		wantStrategy v1.VirtualMachineRunStrategy
		cleared      bool
	}{
		{strategy: v1.RunStrategyAlways, op: opStart, refused: alwaysStart},
		{strategy: v1.RunStrategyAlways, op: opRestart, refused: notRunning},
		{strategy: v1.RunStrategyAlways, op: opStop, wantStrategy: v1.RunStrategyHalted, cleared: true},
		{strategy: v1.RunStrategyRerunOnFailure, op: opStart, refused: underway},
		{strategy: v1.RunStrategyRerunOnFailure, op: opRestart, refused: notRunning},
		// The deliberate deviation: upstream answers 409 VM is not running.
		{strategy: v1.RunStrategyRerunOnFailure, op: opStop, wantStrategy: v1.RunStrategyHalted, cleared: true},
		{strategy: v1.RunStrategyOnce, op: opStart, refused: onceStart},
		{strategy: v1.RunStrategyOnce, op: opRestart, refused: onceRestart},
		{strategy: v1.RunStrategyOnce, op: opStop, wantStrategy: v1.RunStrategyHalted, cleared: true},
	} {
		t.Run(string(tc.strategy)+"/"+tc.op, func(t *testing.T) {
			w, _ := wiringWorker(t, tc.strategy)
			inBackoff(w)
			w.settle()
			before := w.rec.VM.Status.DeepCopy()
			if tc.strategy != v1.RunStrategyOnce && w.rec.VM.Status.PrintableStatus != v1.VirtualMachineStatusCrashLoopBackOff {
				t.Fatalf("printable status %s before the operation, want CrashLoopBackOff", w.rec.VM.Status.PrintableStatus)
			}
			err := do(w, tc.op)
			vm := w.rec.VM
			if w.rec.Attempt != 0 {
				t.Errorf("%d launches, want none during the backoff", w.rec.Attempt)
			}
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("answer %v, want refused with %q", err, tc.refused)
				}
				if got := vm.Status.StartFailure; got == nil || got.ConsecutiveFailCount != 2 || !got.RetryAfterTimestamp.Equal(before.StartFailure.RetryAfterTimestamp) {
					t.Errorf("record %+v after a refusal, want it unchanged", got)
				}
				if len(vm.Status.StateChangeRequests) != len(before.StateChangeRequests) {
					t.Errorf("requests %v after a refusal, want %v", vm.Status.StateChangeRequests, before.StateChangeRequests)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := mustStrategy(vm); got != tc.wantStrategy {
				t.Errorf("run strategy %s, want %s", got, tc.wantStrategy)
			}
			if tc.cleared && vm.Status.StartFailure != nil {
				t.Errorf("record %+v, want cleared", vm.Status.StartFailure)
			}
			if len(vm.Status.StateChangeRequests) != 0 {
				t.Errorf("requests %v, want none (else Halted turns back into Always)", vm.Status.StateChangeRequests)
			}
			if vm.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
				t.Errorf("printable status %s, want Stopped", vm.Status.PrintableStatus)
			}
		})
	}
}

func TestPendingStartRequestNeverSkipsBackoff(t *testing.T) {
	for _, s := range []v1.VirtualMachineRunStrategy{v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure} {
		t.Run(string(s), func(t *testing.T) {
			w, clk := wiringWorker(t, s)
			inBackoff(w)
			w.rec.VM.Status.StateChangeRequests = []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}
			w.settle()
			if w.rec.Attempt != 0 {
				t.Fatalf("started during the backoff with a pending start request")
			}
			if !w.timerAt.Equal(t0.Add(time.Minute)) {
				t.Errorf("timer at %s, want the retry time %s", w.timerAt, t0.Add(time.Minute))
			}
			clk.SetTime(t0.Add(time.Minute))
			w.settle()
			if w.rec.Attempt != 1 {
				t.Fatalf("%d launches at the retry time, want 1", w.rec.Attempt)
			}
		})
	}
}

func TestRerunOnFailureBookkeeping(t *testing.T) {
	w, clk := wiringWorker(t, v1.RunStrategyRerunOnFailure)
	w.rec.VM.Status.RunStrategy = v1.RunStrategyRerunOnFailure
	w.rec.VMI = failedVMI("first")
	w.settle()
	vm := w.rec.VM
	if w.rec.VMI != nil {
		t.Errorf("the failed VMI was kept; upstream deletes it")
	}
	if sf := vm.Status.StartFailure; sf == nil || sf.ConsecutiveFailCount != 1 || sf.LastFailedVMIUID != "first" {
		t.Fatalf("record %+v, want count 1 for VMI first", sf)
	}
	if !backoff.HasStartRequest(vm) || len(vm.Status.StateChangeRequests) != 1 {
		t.Fatalf("requests %v, want one {action: Start} for the backoff", vm.Status.StateChangeRequests)
	}
	if vm.Status.PrintableStatus != v1.VirtualMachineStatusCrashLoopBackOff {
		t.Errorf("printable status %s, want CrashLoopBackOff", vm.Status.PrintableStatus)
	}
	retry := vm.Status.StartFailure.RetryAfterTimestamp.Time
	clk.SetTime(retry.Add(-time.Millisecond))
	w.settle()
	if w.rec.Attempt != 0 || !backoff.HasStartRequest(vm) {
		t.Fatalf("just before the retry: %d launches, requests %v; want none and the request standing", w.rec.Attempt, vm.Status.StateChangeRequests)
	}
	clk.SetTime(retry)
	w.settle()
	if w.rec.Attempt != 1 || w.rec.VMI == nil {
		t.Fatalf("at the retry: %d launches, VMI %v; want a new VMI", w.rec.Attempt, w.rec.VMI)
	}
	if len(vm.Status.StateChangeRequests) != 0 {
		t.Errorf("requests %v once the new VMI exists, want the start trimmed", vm.Status.StateChangeRequests)
	}
}

func TestLauncherThatCannotStartStaysPendingUncounted(t *testing.T) {
	w, clk := wiringWorker(t, v1.RunStrategyAlways)
	if w.rec.VM.Status.RunStrategy != "" {
		t.Fatalf("status.runStrategy %q before any VMI, want empty", w.rec.VM.Status.RunStrategy)
	}
	w.settle()
	vmi := w.rec.VMI
	if vmi == nil || vmi.Status.Phase != v1.Pending {
		t.Fatalf("VMI %+v, want one left Pending", vmi)
	}
	var cond *v1.VirtualMachineInstanceCondition
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Reason == backoff.ReasonFailedCreate {
			cond = &vmi.Status.Conditions[i]
		}
	}
	if cond == nil || cond.Type != v1.VirtualMachineInstanceSynchronized || cond.Status != k8score.ConditionFalse ||
		!strings.HasPrefix(cond.Message, "failed to create virtual machine pod: ") {
		t.Fatalf("conditions %+v, want Synchronized=False reason FailedCreate", vmi.Status.Conditions)
	}
	vm := w.rec.VM
	if vm.Status.StartFailure != nil {
		t.Errorf("record %+v, want a launcher that cannot be created not counted", vm.Status.StartFailure)
	}
	if vm.Status.RunStrategy != v1.RunStrategyAlways {
		t.Errorf("status.runStrategy %q once a VMI exists, want Always", vm.Status.RunStrategy)
	}
	if vm.Status.PrintableStatus != v1.VirtualMachineStatusStarting {
		t.Errorf("printable status %s, want Starting", vm.Status.PrintableStatus)
	}
	if w.rec.Attempt != 1 || !w.timerAt.Equal(t0.Add(createRetryBase)) {
		t.Fatalf("attempt %d, timer %s; want a retry after %s", w.rec.Attempt, w.timerAt, createRetryBase)
	}
	clk.SetTime(t0.Add(createRetryBase))
	w.settle()
	if w.rec.Attempt != 2 || w.rec.VMI.UID != vmi.UID || vm.Status.StartFailure != nil {
		t.Fatalf("after the retry: attempt %d, VMI %s (was %s), record %+v; want the same VMI retried, uncounted",
			w.rec.Attempt, w.rec.VMI.UID, vmi.UID, vm.Status.StartFailure)
	}
	if !w.timerAt.Equal(t0.Add(3 * createRetryBase)) {
		t.Errorf("second retry at %s, want the wait doubled", w.timerAt)
	}
}

func TestManualStartAfterFailedVMI(t *testing.T) {
	w, _ := wiringWorker(t, v1.RunStrategyManual)
	w.rec.VMI = failedVMI("old")
	w.rec.VM.Status.RunStrategy = v1.RunStrategyManual
	w.settle()
	if w.rec.VMI == nil || w.rec.VM.Status.StartFailure != nil {
		t.Fatalf("Manual: VMI %v, record %+v; want the Failed VMI kept and no record", w.rec.VMI, w.rec.VM.Status.StartFailure)
	}
	if err := do(w, opStart); err != nil {
		t.Fatal(err)
	}
	if w.rec.Attempt != 1 || w.rec.VMI == nil || w.rec.VMI.UID == "old" {
		t.Fatalf("attempt %d, VMI %v; want the old VMI deleted and a new one", w.rec.Attempt, w.rec.VMI)
	}
	if len(w.rec.VM.Status.StateChangeRequests) != 0 {
		t.Errorf("requests %v, want both carried out", w.rec.VM.Status.StateChangeRequests)
	}
}

func TestRestartWithoutVMIRefusedForEveryStrategy(t *testing.T) {
	for _, s := range []v1.VirtualMachineRunStrategy{v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure, v1.RunStrategyManual, v1.RunStrategyHalted, v1.RunStrategyOnce} {
		w, _ := wiringWorker(t, s)
		w.rec.VM.Status.RunStrategy = s
		if s == v1.RunStrategyRerunOnFailure || s == v1.RunStrategyManual || s == v1.RunStrategyHalted {
			w.settle() // nothing starts by itself
		}
		w.rec.VMI = nil
		if _, err := w.manual(vmops.OpRestart); err == nil {
			t.Errorf("%s: restart without a VMI accepted", s)
		}
	}
}

// TestFailFastPhases is rule S8: a launcher that crashes at once takes its
// VMI from Pending to Scheduling (the launcher runs) to Failed.
func TestFailFastPhases(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state), path)
	h.failures("crashy", 1)
	started, exited := h.eventsOf("crashy", EventStarted), h.eventsOf("crashy", EventExited)
	if len(started) == 0 || started[0].Phase != string(v1.Scheduling) {
		t.Errorf("Started events %+v, want the VMI Scheduling once its launcher runs", started)
	}
	if len(exited) == 0 || exited[0].Phase != string(v1.Failed) {
		t.Errorf("Exited events %+v, want the VMI Failed", exited)
	}
}

// TestManualStartRequestTrimmed: the {Start} request of a Manual start is
// gone once the VMI exists, also when its launcher crashes at once (as
// KubeVirt v1.6.0 does on cluster-lite).
func TestManualStartRequestTrimmed(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("manual", "Manual", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state), path)
	h.waitFor("manual", "the VM loaded", func(*Snapshot) bool { return true })
	if _, _, err := h.c.Do(context.Background(), opStart, Key{"default", "manual"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("manual", "the launcher's exit", func(*Snapshot) bool { return len(h.eventsOf("manual", EventExited)) > 0 })
	if len(s.VM.Status.StateChangeRequests) != 0 || s.VMI == nil || s.VMI.Status.Phase != v1.Failed {
		t.Fatalf("requests %v, VMI %v; want no request left and the Failed VMI kept", s.VM.Status.StateChangeRequests, s.VMI != nil)
	}
}
