package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"

	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// harness runs one Controller over fake launchers (fakeRuntime) on a fake
// clock for a test. Nothing advances the clock but the test; waits are
// for the controller's own events, with a deadline in real time.
type harness struct {
	t      *testing.T
	c      *Controller
	clk    *clocktesting.FakeClock
	rt     *fakeRuntime
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	events  []Event
	changed chan struct{} // a token after every event
}

// settleWait bounds, in real time, how long a test waits for the
// controller to react; the controller's own time is the fake clock's.
const settleWait = 10 * time.Second

// vmYAML renders a VM manifest for tests.
func vmYAML(name, strategy string, annotations map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\nspec:\n", name)
	if strategy != "" {
		fmt.Fprintf(&b, "  runStrategy: %s\n", strategy)
	}
	b.WriteString("  template:\n    metadata:\n")
	if len(annotations) > 0 {
		b.WriteString("      annotations:\n")
		for k, v := range annotations {
			fmt.Fprintf(&b, "        %s: %q\n", k, v)
		}
	}
	b.WriteString("    spec:\n      terminationGracePeriodSeconds: 1\n      domain:\n        devices: {}\n")
	return b.String()
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testConfig is a controller on a fake clock and fake launchers, time
// scale 1: the fake clock makes KubeVirt's own delays cost nothing.
func testConfig(stateDir string) Config {
	self, _ := os.Executable()
	clk := clocktesting.NewFakeClock(t0)
	return Config{
		StateDir: stateDir, Seed: 42,
		Launcher:      LauncherOptions{Path: self, PollInterval: 10 * time.Millisecond},
		Policy:        backoff.Policy{Scale: 1},
		StartTimeout:  launcherapi.FixedStartTimeout(time.Second),
		KillMargin:    2 * time.Second,
		WatchInterval: 20 * time.Millisecond,
		Clock:         clk,
		Runtime:       newFakeRuntime(clk),
	}
}

func startHarness(t *testing.T, cfg Config, paths ...string) *harness {
	t.Helper()
	h := &harness{t: t, done: make(chan error, 1), changed: make(chan struct{}, 1),
		clk: cfg.Clock.(*clocktesting.FakeClock), rt: cfg.Runtime.(*fakeRuntime)}
	cfg.Observer = ObserverFunc(func(e Event) {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
		select {
		case h.changed <- struct{}{}:
		default:
		}
	})
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ReadManifests(context.Background(), vmexpandexec.Expander{}, paths)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.c, h.cancel = c, cancel
	go func() { h.done <- c.Run(ctx, ms) }()
	t.Cleanup(h.stop)
	h.until("the controller started", func() bool { return len(h.eventsOf("", EventControllerStarted)) > 0 })
	return h
}

// stop shuts the controller down and waits for it.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("controller Run: %v", err)
		}
	case <-time.After(settleWait):
		h.t.Error("controller did not stop")
	}
}

func (h *harness) snapshot(name string) *Snapshot {
	for _, s := range h.c.Snapshots() {
		if s.VM.Name == name {
			return s
		}
	}
	return nil
}

// until waits for cond, checked after every event of the controller and
// every few milliseconds (a change of status alone reports no event).
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.After(settleWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-h.changed:
		case <-tick.C:
		case <-deadline:
			var kinds []string
			for _, e := range h.eventsOf("", "") {
				kinds = append(kinds, fmt.Sprintf("%s %s@%s", e.VM, e.Event, e.Time.Sub(t0)))
			}
			h.t.Fatalf("%s: not reached within %s of real time (fake clock at %s); events: %s", what, settleWait, h.clk.Now().Sub(t0), strings.Join(kinds, ", "))
		}
	}
}

// waitFor waits until cond holds for VM name.
func (h *harness) waitFor(name, what string, cond func(*Snapshot) bool) *Snapshot {
	h.t.Helper()
	var s *Snapshot
	h.until("VM "+name+": "+what, func() bool {
		s = h.snapshot(name)
		return s != nil && cond(s)
	})
	return s
}

// failures drives a crash loop of VM name until it has counted n
// failures: at each planned retry it moves the clock to the retry time.
// It acts on a planned retry once its BackoffPlanned event has been
// reported (a snapshot is published just before the events of the same
// change).
func (h *harness) failures(name string, n int) *Snapshot {
	h.t.Helper()
	for {
		var plan Event
		s := h.waitFor(name, "a retry planned", func(s *Snapshot) bool {
			if s.RetryAfter == nil || s.LauncherPID != 0 {
				return false
			}
			switch plans := h.eventsOf(name, EventBackoffPlanned); {
			case len(plans) > 0:
				plan = plans[len(plans)-1]
				if !plan.RetryAfter.Equal(*s.RetryAfter) {
					return false // its event is still to come
				}
			case len(h.eventsOf(name, EventStarted)) == 0:
				plan = Event{FailCount: failCountOf(s)} // resumed from the state folder
			default:
				return false
			}
			return plan.FailCount >= n || len(h.startsAfter(name, *s.RetryAfter)) == 0
		})
		if plan.FailCount >= n {
			return s
		}
		starts := len(h.eventsOf(name, EventStarted))
		h.until(fmt.Sprintf("VM %s: the retry at %s", name, s.RetryAfter.Sub(t0)), func() bool {
			if len(h.eventsOf(name, EventStarted)) > starts {
				return true
			}
			// Setting the time fires the timers due by then, also one
			// armed for that time after the last setting (a resumed
			// worker arms its timer on its own goroutine).
			h.clk.SetTime(*s.RetryAfter)
			return false
		})
	}
}

// startsAfter are the Started events of VM name at or after at.
func (h *harness) startsAfter(name string, at time.Time) []Event {
	var out []Event
	for _, e := range h.eventsOf(name, EventStarted) {
		if !e.Time.Before(at) {
			out = append(out, e)
		}
	}
	return out
}

// eventsOf returns the events of VM name (all VMs: "") of kind (all: "").
func (h *harness) eventsOf(name string, kind EventKind) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if (name == "" || strings.HasSuffix(e.VM, "/"+name)) && (kind == "" || e.Event == kind) {
			out = append(out, e)
		}
	}
	return out
}

func describe(s *Snapshot) string {
	if s == nil {
		return "<none>"
	}
	fails := 0
	if s.VM.Status.StartFailure != nil {
		fails = s.VM.Status.StartFailure.ConsecutiveFailCount
	}
	phase := ""
	if s.VMI != nil {
		phase = string(s.VMI.Status.Phase)
	}
	return fmt.Sprintf("printable=%s attempt=%d fails=%d phase=%s", s.VM.Status.PrintableStatus, s.Attempt, fails, phase)
}

func failCountOf(s *Snapshot) int {
	if s.VM.Status.StartFailure == nil {
		return 0
	}
	return s.VM.Status.StartFailure.ConsecutiveFailCount
}

func tempDirs(t *testing.T) (state, manifests string) {
	d := t.TempDir()
	state, manifests = filepath.Join(d, "state"), filepath.Join(d, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	return state, manifests
}
