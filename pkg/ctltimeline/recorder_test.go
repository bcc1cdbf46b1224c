package ctltimeline

import (
	"os"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func TestRecorder(t *testing.T) {
	state := t.TempDir()
	k := controller.Key{Namespace: "default", Name: "x"}
	dir := controller.LauncherDir(state, k, 1, "u1")
	if err := os.MkdirAll(string(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	var events []byte
	for _, ev := range []launcherapi.Event{
		{Event: launcherapi.EventScheduled, Scheduled: &launcherapi.ScheduledDetails{Faults: []launcherapi.FaultDecision{{Fault: "qemu-kill"}}}},
		{Event: launcherapi.EventFaultFired, Fault: "qemu-kill"},
		{Event: launcherapi.EventFailed, Reason: launcherapi.ReasonQemuFailed},
	} {
		line, err := ev.MarshalLine()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, line...)
	}
	if err := os.WriteFile(dir.Events(), append(events, "not an event\n"...), 0o644); err != nil {
		t.Fatal(err)
	}

	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := NewRecorder("t", "", 0)
	for _, e := range []controller.Event{
		{Time: at(0), Event: controller.EventControllerStarted, StateDir: state, Seed: 7, TimeScale: 0.01},
		{Time: at(1), Event: controller.EventStarted, VM: k.String(), Attempt: 1, VMIUID: "u1"},
		{Time: at(2), Event: controller.EventScheduled, VM: k.String(), Attempt: 1},
		{Time: at(3), Event: controller.EventFailed, VM: k.String(), Attempt: 1, Reason: launcherapi.ReasonQemuFailed},
		{Time: at(4), Event: controller.EventBackoffPlanned, VM: k.String(), Attempt: 1, FailCount: 1, ScaledDelayNs: int64(100 * time.Millisecond)},
		{Time: at(110), Event: controller.EventStarted, VM: k.String(), Attempt: 2, VMIUID: "u2"},
		{Time: at(120), Event: controller.EventStopRequested, VM: k.String()},
	} {
		r.Observe(e)
	}
	tl := r.Timeline()
	if tl.Seed != 7 || tl.TimeScale != 0.01 || len(tl.Attempts) != 2 || r.Changes() != 7 {
		t.Fatalf("timeline %+v, %d changes", tl, r.Changes())
	}
	a := tl.Attempts[0]
	if a.Attempt != 1 {
		a = tl.Attempts[1]
	}
	if a.Fault != "qemu-kill" || a.Reason != launcherapi.ReasonQemuFailed || len(a.Phases) != 3 || a.FailCount != 1 {
		t.Errorf("attempt 1: %+v", a)
	}
	if a.Planned != 100*time.Millisecond || a.Observed != 106*time.Millisecond || a.Low != 100*time.Millisecond || a.High != 150*time.Millisecond {
		t.Errorf("attempt 1 delays: planned %v observed %v envelope [%v, %v]", a.Planned, a.Observed, a.Low, a.High)
	}
}
