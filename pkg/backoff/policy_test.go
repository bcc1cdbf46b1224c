package backoff

import (
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	v1 "kubevirt.io/api/core/v1"
)

// TestSyncWindowRules covers CountRunningFailuresWithin, an extension
// upstream does not have; upstream's rules are in rules_test.go.
func TestSyncWindowRules(t *testing.T) {
	const (
		running = v1.Running
		failed  = v1.Failed
	)
	minute := time.Minute
	cases := []struct {
		name      string
		policy    Policy
		vm        *v1.VirtualMachine
		vmi       *v1.VirtualMachineInstance
		now       time.Duration // fake clock offset from t0
		wantCount int           // 0 = no record afterwards
		counted   bool
		cleared   bool
	}{
		{name: "window: still Running inside the window keeps the record",
			policy: Policy{CountRunningFailuresWithin: 10 * minute},
			vm:     withRecord(newVM(v1.RunStrategyAlways), 2, "a"), vmi: newVMI("b", phaseAt{running, 0}),
			now: 9 * minute, wantCount: 2},
		{name: "window: Running for the whole window clears",
			policy: Policy{CountRunningFailuresWithin: 10 * minute},
			vm:     withRecord(newVM(v1.RunStrategyAlways), 2, "a"), vmi: newVMI("b", phaseAt{running, 0}),
			now: 10 * minute, cleared: true},
		{name: "window: failing inside the window after Running counts",
			policy: Policy{CountRunningFailuresWithin: 10 * minute},
			vm:     withRecord(newVM(v1.RunStrategyAlways), 2, "a"), vmi: newVMI("b", phaseAt{running, 0}, phaseAt{failed, 2 * minute}),
			now: 20 * minute, wantCount: 3, counted: true},
		{name: "window: failing after the window clears",
			policy: Policy{CountRunningFailuresWithin: 10 * minute},
			vm:     withRecord(newVM(v1.RunStrategyAlways), 2, "a"), vmi: newVMI("b", phaseAt{running, 0}, phaseAt{failed, 12 * minute}),
			now: 12 * minute, cleared: true},
		{name: "window is scaled",
			policy: Policy{CountRunningFailuresWithin: 10 * minute, Scale: 0.01},
			vm:     withRecord(newVM(v1.RunStrategyAlways), 2, "a"), vmi: newVMI("b", phaseAt{running, 0}),
			now: 6 * time.Second, cleared: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0().Add(c.now))
			tr := Tracker{Policy: c.policy, Clock: clk, Rand: rand.New(rand.NewPCG(1, 1))}
			ch := tr.Sync(c.vm, c.vmi, &History{})
			gotCount := 0
			if sf := c.vm.Status.StartFailure; sf != nil {
				gotCount = sf.ConsecutiveFailCount
			}
			if gotCount != c.wantCount || ch.Counted != c.counted || ch.Cleared != c.cleared {
				t.Fatalf("count=%d counted=%v cleared=%v, want count=%d counted=%v cleared=%v (change %+v)",
					gotCount, ch.Counted, ch.Cleared, c.wantCount, c.counted, c.cleared, ch)
			}
			if ch.Counted {
				sf := c.vm.Status.StartFailure
				if sf.LastFailedVMIUID != c.vmi.UID {
					t.Errorf("lastFailedVMIUID = %q, want %q", sf.LastFailedVMIUID, c.vmi.UID)
				}
				wantRetry := clk.Now().Add(tr.Policy.Scaled(ch.Delay))
				if !sf.RetryAfterTimestamp.Time.Equal(wantRetry) || !ch.RetryAfter.Equal(wantRetry) {
					t.Errorf("retryAfter = %s / %s, want %s", sf.RetryAfterTimestamp.Time, ch.RetryAfter, wantRetry)
				}
			}
		})
	}
}

func TestSyncRetryTimeFollowsScaledCurve(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0())
	tr := Tracker{Policy: Policy{Scale: 0.01}, Clock: clk, Rand: rand.New(rand.NewPCG(3, 3))}
	vm := newVM(v1.RunStrategyAlways)
	h := &History{}
	for n := 1; n <= 7; n++ {
		uid := types.UID(string(rune('a' + n)))
		ch := tr.Sync(vm, newVMI(uid, phaseAt{v1.Failed, 0}), h)
		lo, hi := KubeVirt{}.Bounds(n)
		if ch.FailCount != n || ch.Delay < lo || ch.Delay > hi {
			t.Fatalf("failure %d: count %d delay %s, want count %d delay in [%s, %s]", n, ch.FailCount, ch.Delay, n, lo, hi)
		}
		if ch.ScaledDelay != ch.Delay/100 {
			t.Fatalf("failure %d: scaled %s, want %s", n, ch.ScaledDelay, ch.Delay/100)
		}
		if left := TimeLeft(vm, clk.Now()); left != ch.ScaledDelay {
			t.Fatalf("failure %d: TimeLeft = %s, want %s", n, left, ch.ScaledDelay)
		}
		at, ok := NextStart(vm, h)
		if !ok || !at.Equal(clk.Now().Add(ch.ScaledDelay)) {
			t.Fatalf("failure %d: NextStart = %s %v", n, at, ok)
		}
		clk.SetTime(at)
		if left := TimeLeft(vm, clk.Now()); left != 0 {
			t.Fatalf("failure %d: TimeLeft at retry time = %s, want 0", n, left)
		}
	}
}

func TestGiveUp(t *testing.T) {
	cases := []struct {
		name    string
		policy  Policy
		spacing time.Duration
		gaveUp  int // failure number that gives up; 0 = never within 6
	}{
		{"off by default", Policy{}, time.Second, 0},
		{"after 3 consecutive", Policy{GiveUpAfter: 3}, time.Hour, 3},
		{"after 3 within a minute, failures close together", Policy{GiveUpAfter: 3, GiveUpWindow: time.Minute}, 10 * time.Second, 3},
		{"after 3 within a minute, failures spread out", Policy{GiveUpAfter: 3, GiveUpWindow: time.Minute}, 40 * time.Second, 0},
		{"window is scaled", Policy{GiveUpAfter: 3, GiveUpWindow: time.Minute, Scale: 0.1}, 4 * time.Second, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0())
			tr := Tracker{Policy: c.policy, Clock: clk, Rand: rand.New(rand.NewPCG(1, 2))}
			vm, h := newVM(v1.RunStrategyAlways), &History{}
			got := 0
			for n := 1; n <= 6 && got == 0; n++ {
				ch := tr.Sync(vm, newVMI(types.UID(rune('a'+n)), phaseAt{v1.Failed, 0}), h)
				if ch.GaveUp {
					got = n
					if _, ok := NextStart(vm, h); ok {
						t.Error("NextStart says ok after giving up")
					}
					if vm.Status.StartFailure.RetryAfterTimestamp != nil {
						t.Error("retryAfterTimestamp set after giving up")
					}
				}
				clk.SetTime(clk.Now().Add(c.spacing))
			}
			if got != c.gaveUp {
				t.Fatalf("gave up at failure %d, want %d", got, c.gaveUp)
			}
			if got > 0 {
				ClearRecord(vm, h)
				if vm.Status.StartFailure != nil || h.GaveUp || len(h.Failures) != 0 {
					t.Fatalf("ClearRecord left %+v %+v", vm.Status.StartFailure, h)
				}
				if _, ok := NextStart(vm, h); !ok {
					t.Fatal("NextStart not ok after a manual clear")
				}
			}
		})
	}
}

func TestResetCheckAt(t *testing.T) {
	tr := Tracker{Policy: Policy{CountRunningFailuresWithin: 10 * time.Minute, Scale: 0.5}, Clock: clocktesting.NewFakePassiveClock(t0())}
	vm := withRecord(newVM(v1.RunStrategyAlways), 1, "a")
	at, ok := tr.ResetCheckAt(vm, newVMI("b", phaseAt{v1.Running, time.Minute}))
	if !ok || !at.Equal(t0().Add(time.Minute+5*time.Minute)) {
		t.Fatalf("ResetCheckAt = %s %v, want t0+6m", at, ok)
	}
	if _, ok := (Tracker{}).ResetCheckAt(vm, newVMI("b", phaseAt{v1.Running, 0})); ok {
		t.Fatal("ResetCheckAt asked for a check with the window off")
	}
}
