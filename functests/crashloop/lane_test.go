package crashloop

import (
	"strings"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// loop makes the events of a fail-fast loop whose delays come from curve,
// with draws from r, at scale.
func loop(curve backoff.Curve, r backoff.Rand, n int, scale float64) []controller.Event {
	var evs []controller.Event
	now := t0
	for c := 1; c <= n; c++ {
		evs = append(evs, controller.Event{Time: now, Event: controller.EventStarted, VM: "default/x", Attempt: c})
		now = now.Add(20 * time.Millisecond)
		d := time.Duration(float64(curve.Delay(c, r)) * scale)
		evs = append(evs, controller.Event{Time: now, Event: controller.EventBackoffPlanned, VM: "default/x", Attempt: c, FailCount: c, ScaledDelayNs: d.Nanoseconds()})
		now = now.Add(d + 3*time.Millisecond)
	}
	return append(evs, controller.Event{Time: now, Event: controller.EventStarted, VM: "default/x", Attempt: n + 1})
}

type fixedRand int

func (f fixedRand) IntN(n int) int { return min(int(f), n-1) }

func TestEnvelopeAcceptsKubeVirtAndRejectsOtherCurves(t *testing.T) {
	for _, r := range []fixedRand{0, 1 << 30} { // smallest and largest jitter
		if err := CheckEnvelope(Retries(loop(backoff.KubeVirt{}, r, 6, 0.02)), 0.02, 50*time.Millisecond); err != nil {
			t.Fatalf("KubeVirt's own curve rejected: %v", err)
		}
	}
	// Negative controls: a wrong implementation must be caught.
	wrong := map[string]backoff.Curve{
		"kubelet":         backoff.Exponential{Initial: 10 * time.Second, Max: 300 * time.Second, Factor: 2},
		"kubelet-reduced": backoff.Exponential{Initial: time.Second, Max: 60 * time.Second, Factor: 2},
		"systemd":         backoff.Steps{Initial: time.Second, Max: 300 * time.Second, Steps: 5},
		"linear n x 10s":  linear{},
	}
	for name, c := range wrong {
		err := CheckEnvelope(Retries(loop(c, fixedRand(0), 5, 0.02)), 0.02, 50*time.Millisecond)
		if err == nil {
			t.Fatalf("%s passed KubeVirt's envelope check", name)
		}
		t.Logf("%s rejected: %v", name, err)
	}
	// A controller that sleeps longer than it planned is caught too.
	evs := loop(backoff.KubeVirt{}, fixedRand(0), 3, 0.02)
	evs[len(evs)-1].Time = evs[len(evs)-1].Time.Add(time.Second)
	if err := CheckEnvelope(Retries(evs), 0.02, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "waited") {
		t.Fatalf("late retry not caught: %v", err)
	}
}

type linear struct{}

func (linear) Delay(n int, _ backoff.Rand) time.Duration { return time.Duration(n) * 10 * time.Second }
func (linear) String() string                            { return "linear" }

func TestRetriesDropWaitsEndedByAManualOperation(t *testing.T) {
	evs := []controller.Event{
		{Time: t0, Event: controller.EventBackoffPlanned, VM: "a", FailCount: 1, ScaledDelayNs: 1},
		{Time: t0.Add(time.Second), Event: controller.EventStopRequested, VM: "a"},
		{Time: t0.Add(2 * time.Second), Event: controller.EventStarted, VM: "a"},
	}
	if r := Retries(evs); len(r) != 0 {
		t.Fatalf("retries = %+v, want none", r)
	}
}

func herd(jitter bool, n int, scale float64) (fails, retries []time.Time) {
	for i := range n {
		f := t0.Add(time.Duration(i) * 4 * time.Millisecond) // launchers die within 80 ms
		d := 10 * time.Second
		if jitter {
			d += time.Duration(i%6) * time.Second
		}
		fails = append(fails, f)
		retries = append(retries, f.Add(time.Duration(float64(d)*scale)))
	}
	return fails, retries
}

func TestHerdCheckRejectsLockstepRetries(t *testing.T) {
	f, r := herd(true, 20, 0.5)
	if _, rs, err := CheckHerd(f, r, 0.5); err != nil {
		t.Fatalf("jittered herd rejected: %v", err)
	} else {
		t.Logf("jittered: %s", rs)
	}
	f, r = herd(false, 20, 0.5)
	_, _, err := CheckHerd(f, r, 0.5)
	if err == nil {
		t.Fatal("a herd retrying in lockstep passed the spread check")
	}
	t.Logf("no jitter rejected: %v", err)
}

func TestTimeoutWindowCatchesTimeoutsThatIgnoreTheirWindow(t *testing.T) {
	const scale = 0.01
	base, jitter := 240*time.Second, 120*time.Second
	good := TimeoutRun{Passed: 3100 * time.Millisecond, Drawn: 3100 * time.Millisecond, ScheduledAt: t0,
		Failed: t0.Add(3300 * time.Millisecond), Reason: "QemuStartTimeout"}
	if err := CheckTimeoutWindow(good, base, jitter, scale, time.Second); err != nil {
		t.Fatalf("good run rejected: %v", err)
	}
	wrong := map[string]func(TimeoutRun) TimeoutRun{
		"fires at the base, ignoring the drawn jitter": func(r TimeoutRun) TimeoutRun { r.Failed = t0.Add(2400 * time.Millisecond); return r },
		"never fires in time (no timeout)":             func(r TimeoutRun) TimeoutRun { r.Failed = t0.Add(20 * time.Second); return r },
		"drawn outside the window":                     func(r TimeoutRun) TimeoutRun { r.Drawn, r.Passed = time.Second, time.Second; return r },
		"launcher ignores the controller's value":      func(r TimeoutRun) TimeoutRun { r.Drawn = 3500 * time.Millisecond; return r },
		"another failure":                              func(r TimeoutRun) TimeoutRun { r.Reason = "QemuFailed"; return r },
	}
	for name, f := range wrong {
		if err := CheckTimeoutWindow(f(good), base, jitter, scale, time.Second); err == nil {
			t.Fatalf("%s: passed", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestDiffOutcomes(t *testing.T) {
	a := map[string][]Outcome{"x": {{Attempt: 1, Faults: "launcher-crash", Phase: "Failed"}}}
	b := map[string][]Outcome{"x": {{Attempt: 1, Faults: "", Phase: "Running"}, {Attempt: 2}}}
	if d := DiffOutcomes(a, a); len(d) != 0 {
		t.Fatal(d)
	}
	if d := DiffOutcomes(a, b); len(d) != 2 {
		t.Fatalf("diff = %v", d)
	}
}
