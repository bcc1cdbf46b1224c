package launcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/hypervisor"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// The lifecycle's unit tests: a fake domain, a fake clock, no libvirt and
// no sleeping. Waits are for a condition with a real-time deadline.

const (
	startTimeout = 10 * time.Second
	gracePeriod  = 3 * time.Second
	deadline     = 2 * time.Second
)

// fakeClock is a FakeClock that counts the timers made and the timer
// ticks the lifecycle has received, so a test steps time only once the
// lifecycle waits on it, and knows when a tick was taken.
type fakeClock struct {
	*testingclock.FakeClock
	made, taken atomic.Int32
}

type trackedTimer struct {
	clock.Timer
	c chan time.Time
}

func (t *trackedTimer) C() <-chan time.Time { return t.c }

func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	inner := c.FakeClock.NewTimer(d)
	t := &trackedTimer{Timer: inner, c: make(chan time.Time)}
	go func() {
		t.c <- <-inner.C()
		c.taken.Add(1)
	}()
	c.made.Add(1)
	return t
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := c.FakeClock.AfterFunc(d, f)
	c.made.Add(1)
	return t
}

// fakeDomain records the calls the lifecycle makes.
type fakeDomain struct {
	mu          sync.Mutex
	calls       []string
	running     bool
	runOnStart  bool
	startErr    error
	qemuStarted bool
	onShutdown  func(d *fakeDomain)
	events      chan hypervisor.Event
	exited      chan syscall.WaitStatus
}

func newFakeDomain() *fakeDomain {
	return &fakeDomain{runOnStart: true, events: make(chan hypervisor.Event, 16), exited: make(chan syscall.WaitStatus, 1)}
}

func (d *fakeDomain) record(call string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call)
}

func (d *fakeDomain) called(call string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.calls, call)
}

func (d *fakeDomain) Start(paused bool) error {
	if paused {
		d.record("start paused")
	} else {
		d.record("start")
	}
	if d.startErr != nil {
		return d.startErr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running = d.runOnStart && !paused
	return nil
}

func (d *fakeDomain) QEMUStarted() bool { return d.qemuStarted }

func (d *fakeDomain) Running() (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running, nil
}

func (d *fakeDomain) Resume() error {
	d.record("resume")
	d.mu.Lock()
	d.running = true
	d.mu.Unlock()
	d.events <- hypervisor.Event{Kind: hypervisor.EventResumed}
	return nil
}

func (d *fakeDomain) Shutdown() error {
	d.record("shutdown")
	if d.onShutdown != nil {
		go d.onShutdown(d)
	}
	return nil
}

func (d *fakeDomain) Destroy() error                    { d.record("destroy"); return nil }
func (d *fakeDomain) Release() error                    { d.record("release"); return nil }
func (d *fakeDomain) Kill(sig syscall.Signal) error     { d.record("kill " + signalName(sig)); return nil }
func (d *fakeDomain) Events() <-chan hypervisor.Event   { return d.events }
func (d *fakeDomain) Exited() <-chan syscall.WaitStatus { return d.exited }
func (d *fakeDomain) stop(reason hypervisor.StopReason) {
	d.events <- hypervisor.Event{Kind: hypervisor.EventStopped, Reason: reason}
}
func (d *fakeDomain) die(sig syscall.Signal) { d.exited <- syscall.WaitStatus(sig) }
func (s *fakeSession) Close() error          { s.dom.record("close"); return nil }
func (s *fakeSession) Define(*libvirtxml.Domain) (hypervisor.Domain, error) {
	s.dom.record("define")
	return s.dom, nil
}

type fakeSession struct{ dom *fakeDomain }

// eventSink turns the emitter's lines back into events.
type eventSink chan launcherapi.Event

func (s eventSink) Write(p []byte) (int, error) {
	ev, err := launcherapi.ParseEvent(p)
	if err != nil {
		return 0, err
	}
	s <- ev
	return len(p), nil
}

// rig is one lifecycle run under test.
type rig struct {
	t       *testing.T
	clk     *fakeClock
	t0      time.Time
	dom     *fakeDomain
	events  eventSink
	seen    []launcherapi.Event
	result  chan Result
	crashed chan string
	stop    context.CancelFunc
}

// launchWith runs the lifecycle on dom with the given --fault terms.
func launchWith(t *testing.T, dom *fakeDomain, faultTerms ...string) *rig {
	t.Helper()
	plan, err := faults.Parse(nil, faultTerms)
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := HooksFor(plan.Decide(faults.DecideInput{Seed: 1, Key: "ns/vm", Attempt: 1}))
	if err != nil {
		t.Fatal(err)
	}
	built := &DomainEdit{Domain: &libvirtxml.Domain{Name: "ns_vm", OS: &libvirtxml.DomainOS{Kernel: "/boot/vmlinuz", Cmdline: "console=ttyS0"}}}
	if err := hooks.BuildDomain(built); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &rig{t: t, clk: &fakeClock{FakeClock: testingclock.NewFakeClock(t0)}, t0: t0, dom: dom,
		events: make(eventSink, 100), result: make(chan Result, 1), crashed: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	t.Cleanup(cancel)
	cfg := Config{
		Open:        func() (hypervisor.Session, error) { dom.record("open"); return &fakeSession{dom}, nil },
		Domain:      built.Domain,
		Built:       built,
		QemuTimeout: startTimeout,
		GracePeriod: gracePeriod,
		Hooks:       hooks,
		Clock:       r.clk,
		Events:      NewEmitter(r.events, launcherapi.FormatJSON, launcherapi.Event{VMI: "vm", Namespace: "ns"}),
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Crash: func(msg string) {
			r.crashed <- msg
			runtime.Goexit()
		},
	}
	go func() { r.result <- Run(ctx, cfg) }()
	return r
}

// waitUntil waits for cond, failing the test after the deadline.
func (r *rig) waitUntil(what string, cond func() bool) {
	r.t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			r.t.Fatalf("timed out waiting for %s; domain calls %v", what, r.dom.calls)
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// step moves the fake clock once the lifecycle has made n timers.
func (r *rig) step(n int32, d time.Duration) {
	r.t.Helper()
	r.waitUntil("the lifecycle's timers", func() bool { return r.clk.made.Load() >= n })
	r.clk.Step(d)
}

// expire steps the clock to just before d, then to d.
func (r *rig) expire(n int32, d time.Duration) {
	r.t.Helper()
	r.step(n, d-time.Millisecond)
	r.step(n, time.Millisecond)
}

// destroyedAt checks that the launch ended at +d of fake time and
// destroyed its domain.
func (r *rig) destroyedAt(d time.Duration, final launcherapi.Event) {
	r.t.Helper()
	if got := final.Time.Sub(r.t0); got != d {
		r.t.Errorf("ended at +%v, want exactly +%v", got, d)
	}
	if !r.dom.called("destroy") {
		r.t.Error("the domain was not destroyed")
	}
}

// event waits for the next event named name, skipping none.
func (r *rig) event(name string) launcherapi.Event {
	r.t.Helper()
	select {
	case ev := <-r.events:
		r.seen = append(r.seen, ev)
		if ev.Event != name {
			r.t.Fatalf("event %s (%s %q), want %s", ev.Event, ev.Fault, ev.Message, name)
		}
		return ev
	case <-time.After(deadline):
		r.t.Fatalf("no %s event; domain calls %v", name, r.dom.calls)
	}
	return launcherapi.Event{}
}

// end waits for the final event and the result, and checks both.
func (r *rig) end(reason string, code launcherapi.ExitCode, msg string) launcherapi.Event {
	r.t.Helper()
	name := launcherapi.EventFailed
	if code == launcherapi.ExitSucceeded {
		name = launcherapi.EventSucceeded
	}
	ev := r.event(name)
	if ev.Reason != reason || ev.ExitCode == nil || *ev.ExitCode != int(code) || !strings.Contains(ev.Message, msg) {
		r.t.Fatalf("final event %s/%s exit %v %q, want %s exit %d containing %q", ev.Event, ev.Reason, ev.ExitCode, ev.Message, reason, code, msg)
	}
	select {
	case res := <-r.result:
		if res.ExitCode != code || res.Reason != reason {
			r.t.Fatalf("result %+v, want %s exit %d", res, reason, code)
		}
	case <-time.After(deadline):
		r.t.Fatal("Run did not return after its final event")
	}
	if !r.dom.called("close") {
		r.t.Error("the session was not closed")
	}
	return ev
}

// crash waits for an injected launcher crash.
func (r *rig) crash(at string) {
	r.t.Helper()
	fired := r.event(launcherapi.EventFaultFired)
	if fired.Fault != "launcher-crash" || fired.Fired == nil || fired.Fired.At != at {
		r.t.Fatalf("FaultFired %+v, want launcher-crash at %s", fired, at)
	}
	select {
	case msg := <-r.crashed:
		if !strings.Contains(msg, "Simulated virt-launcher crash (fault launcher-crash at "+at+")") {
			r.t.Fatalf("crash message %q", msg)
		}
	case <-time.After(deadline):
		r.t.Fatal("the launcher did not crash")
	}
}

func TestStartTimeoutFires(t *testing.T) {
	dom := newFakeDomain()
	dom.runOnStart = false
	r := launchWith(t, dom)
	r.waitUntil("the start", func() bool { return dom.called("start") })
	r.expire(1, startTimeout)
	r.destroyedAt(startTimeout, r.end(launcherapi.ReasonQemuStartTimeout, launcherapi.ExitQemuStartTimeout, "not running within the QEMU start timeout of 10s"))
}

func TestStartTimeoutDoesNotFireAfterRunning(t *testing.T) {
	dom := newFakeDomain()
	r := launchWith(t, dom)
	running := r.event(launcherapi.EventRunning)
	if running.Phase != launcherapi.PhaseRunning {
		t.Errorf("Running event phase %s", running.Phase)
	}
	r.step(1, startTimeout)
	r.waitUntil("the lifecycle to take the timeout", func() bool { return r.clk.taken.Load() >= 1 })
	dom.stop(hypervisor.StopShutdown)
	r.end(launcherapi.ReasonGuestShutdown, launcherapi.ExitSucceeded, "the guest powered off")
}

func TestGracePeriodGuestStopsWithin(t *testing.T) {
	dom := newFakeDomain()
	dom.onShutdown = func(d *fakeDomain) { d.stop(hypervisor.StopShutdown) }
	r := launchWith(t, dom)
	r.event(launcherapi.EventRunning)
	r.stop()
	ev := r.end(launcherapi.ReasonStopped, launcherapi.ExitSucceeded, "the guest shut down within the grace period")
	if ev.Stopped == nil || ev.Stopped.How != launcherapi.StopGraceful {
		t.Errorf("stopped details %+v, want How %s", ev.Stopped, launcherapi.StopGraceful)
	}
	if dom.called("destroy") && slices.Index(dom.calls, "destroy") < slices.Index(dom.calls, "shutdown") {
		t.Errorf("destroyed before the power button: %v", dom.calls)
	}
}

// QEMU killed from outside (the OOM killer) during the grace period is a
// crash, not a stop.
func TestQemuKilledWhileShuttingDown(t *testing.T) {
	dom := newFakeDomain()
	r := launchWith(t, dom)
	r.event(launcherapi.EventRunning)
	r.stop()
	r.waitUntil("the power button", func() bool { return dom.called("shutdown") })
	dom.die(syscall.SIGKILL)
	r.end(launcherapi.ReasonVMCrashed, launcherapi.ExitVMCrashed, "QEMU was killed by SIGKILL while the guest was shutting down")
}

func TestGracePeriodExpires(t *testing.T) {
	dom := newFakeDomain()
	r := launchWith(t, dom)
	r.event(launcherapi.EventRunning)
	r.stop()
	r.waitUntil("the power button", func() bool { return dom.called("shutdown") })
	r.expire(2, gracePeriod)
	ev := r.end(launcherapi.ReasonStopped, launcherapi.ExitSucceeded, "did not shut down within the 3s grace period")
	if ev.Stopped == nil || ev.Stopped.How != launcherapi.StopDestroyed {
		t.Errorf("stopped details %+v, want How %s", ev.Stopped, launcherapi.StopDestroyed)
	}
	r.destroyedAt(gracePeriod, ev)
}

func TestQemuDiesBeforeRunning(t *testing.T) {
	dom := newFakeDomain()
	dom.runOnStart = false
	r := launchWith(t, dom)
	r.waitUntil("the start", func() bool { return dom.called("start") })
	dom.die(syscall.SIGKILL)
	r.end(launcherapi.ReasonQemuFailed, launcherapi.ExitQemuFailed, "QEMU was killed by SIGKILL before the domain was running")
}

func TestQemuDiesAfterRunning(t *testing.T) {
	dom := newFakeDomain()
	r := launchWith(t, dom)
	r.event(launcherapi.EventRunning)
	dom.die(syscall.SIGSEGV)
	r.end(launcherapi.ReasonVMCrashed, launcherapi.ExitVMCrashed, "QEMU was killed by SIGSEGV after the domain was running")
}

func TestQemuRefusesToStart(t *testing.T) {
	dom := newFakeDomain()
	dom.startErr, dom.qemuStarted = errors.New("qemu-system-x86_64: could not load kernel"), true
	launchWith(t, dom).end(launcherapi.ReasonQemuFailed, launcherapi.ExitQemuFailed, "could not load kernel")

	dom = newFakeDomain()
	dom.startErr = errors.New("internal error: cgroup")
	launchWith(t, dom).end(launcherapi.ReasonLibvirtError, launcherapi.ExitLibvirtError, "cgroup")
}

func TestGuestPanic(t *testing.T) {
	dom := newFakeDomain()
	r := launchWith(t, dom)
	r.event(launcherapi.EventRunning)
	dom.events <- hypervisor.Event{Kind: hypervisor.EventCrashed, Panicked: true}
	dom.stop(hypervisor.StopCrashed)
	r.end(launcherapi.ReasonGuestPanicked, launcherapi.ExitVMCrashed, "the guest kernel panicked")
}

// crashAt checks a launcher crash at a point, after the domain call did
// and before the call didNot.
func crashAt(at, did, didNot string) func(t *testing.T, r *rig) {
	return func(t *testing.T, r *rig) {
		r.crash(at)
		if (did != "" && !r.dom.called(did)) || r.dom.called(didNot) {
			t.Errorf("calls %v, want %q and no %q", r.dom.calls, did, didNot)
		}
	}
}

// TestFaultAtEveryPoint runs one fault at each lifecycle point.
func TestFaultAtEveryPoint(t *testing.T) {
	covered := map[faults.Point]bool{}
	cases := []struct {
		point faults.Point
		fault string
		check func(t *testing.T, r *rig)
	}{
		{faults.PointBuildDomain, "guest-panic=after=2s", func(t *testing.T, r *rig) {
			fired := r.event(launcherapi.EventFaultFired)
			if fired.Fault != "guest-panic" || !strings.Contains(fired.Message, "kernel command line") {
				t.Errorf("FaultFired %+v", fired)
			}
			r.event(launcherapi.EventRunning)
			dom := r.dom
			if !dom.called("start") {
				t.Error("not started")
			}
			dom.stop(hypervisor.StopShutdown)
			r.end(launcherapi.ReasonGuestShutdown, launcherapi.ExitSucceeded, "powered off")
		}},
		{faults.PointBeforeLibvirt, "launcher-crash=at=before-libvirt", crashAt("before-libvirt", "", "open")},
		{faults.PointBeforeDefine, "launcher-crash=at=before-define", crashAt("before-define", "open", "define")},
		{faults.PointDefine, "libvirt-error=at=define", func(t *testing.T, r *rig) {
			if f := r.event(launcherapi.EventFaultFired); f.Fault != "libvirt-error" {
				t.Errorf("FaultFired %+v", f)
			}
			r.end(launcherapi.ReasonLibvirtError, launcherapi.ExitLibvirtError, "defining domain ns_vm: injected libvirt error")
			if r.dom.called("define") {
				t.Error("defined despite the define error")
			}
		}},
		{faults.PointBeforeStart, "launcher-crash=at=before-start", crashAt("before-start", "define", "start")},
		{faults.PointStart, "qemu-slow-start=after=4s", func(t *testing.T, r *rig) {
			r.event(launcherapi.EventFaultFired)
			r.waitUntil("a paused start", func() bool { return r.dom.called("start paused") })
			r.step(2, 4*time.Second)
			running := r.event(launcherapi.EventRunning)
			if got := running.Time.Sub(r.t0); got != 4*time.Second {
				t.Errorf("Running at +%v, want +4s", got)
			}
			r.dom.stop(hypervisor.StopShutdown)
			r.end(launcherapi.ReasonGuestShutdown, launcherapi.ExitSucceeded, "powered off")
		}},
		{faults.PointStart, "libvirt-error=at=start", func(t *testing.T, r *rig) {
			r.event(launcherapi.EventFaultFired)
			r.end(launcherapi.ReasonLibvirtError, launcherapi.ExitLibvirtError, "starting domain ns_vm: injected libvirt error")
			if r.dom.called("start") || r.dom.called("start paused") {
				t.Error("started despite the start error")
			}
		}},
		{faults.PointStart, "qemu-hang", func(t *testing.T, r *rig) {
			r.event(launcherapi.EventFaultFired)
			r.waitUntil("a paused start", func() bool { return r.dom.called("start paused") })
			r.step(1, startTimeout)
			r.end(launcherapi.ReasonQemuStartTimeout, launcherapi.ExitQemuStartTimeout, "start timeout")
		}},
		{faults.PointAfterStart, "qemu-kill=after=2s,signal=SIGTERM", func(t *testing.T, r *rig) {
			r.event(launcherapi.EventRunning)
			r.step(2, 2*time.Second)
			fired := r.event(launcherapi.EventFaultFired)
			if fired.Fault != "qemu-kill" || fired.Fired == nil || fired.Fired.Signal != "SIGTERM" {
				t.Errorf("FaultFired %+v", fired)
			}
			r.waitUntil("the kill", func() bool { return r.dom.called("kill SIGTERM") })
			r.dom.stop(hypervisor.StopFailed)
			r.end(launcherapi.ReasonVMCrashed, launcherapi.ExitVMCrashed, "QEMU was killed by SIGTERM after the domain was running")
		}},
		{faults.PointAfterRunning, "launcher-crash=at=after-running", func(t *testing.T, r *rig) {
			r.event(launcherapi.EventRunning)
			r.crash("after-running")
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.point)+"/"+tc.fault, func(t *testing.T) {
			plan, err := faults.Parse(nil, []string{tc.fault})
			if err != nil {
				t.Fatal(err)
			}
			if d := plan.Decide(faults.DecideInput{Key: "ns/vm", Attempt: 1}); len(d) != 1 || d[0].Point != tc.point {
				t.Fatalf("%s decides %v, want one fault at %s", tc.fault, d, tc.point)
			}
			covered[tc.point] = true
			tc.check(t, launchWith(t, newFakeDomain(), tc.fault))
		})
	}
	for _, p := range []faults.Point{faults.PointBuildDomain, faults.PointBeforeLibvirt, faults.PointBeforeDefine, faults.PointDefine,
		faults.PointBeforeStart, faults.PointStart, faults.PointAfterStart, faults.PointAfterRunning} {
		if !covered[p] {
			t.Errorf("no fault tested at %s", p)
		}
	}
}

func TestBuildDomainFaults(t *testing.T) {
	plan, err := faults.Parse(nil, []string{"qemu-bad-config=delay=1s", "guest-poweroff=after=3s", "guest-noready"})
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := HooksFor(plan.Decide(faults.DecideInput{Key: "ns/vm", Attempt: 1}))
	if err != nil {
		t.Fatal(err)
	}
	e := &DomainEdit{Domain: &libvirtxml.Domain{OS: &libvirtxml.DomainOS{Kernel: "/k", Cmdline: "console=ttyS0"}}}
	if err := hooks.BuildDomain(e); err != nil {
		t.Fatal(err)
	}
	if e.Domain.OS.Kernel != faults.BadKernelPath || e.Domain.OS.Cmdline != "console=ttyS0 harness.poweroff=3 harness.noready" || e.hold != time.Second {
		t.Errorf("edited domain OS %+v, hold %v", e.Domain.OS, e.hold)
	}
	if len(e.announce) != 3 {
		t.Errorf("announced %v", e.announce)
	}
	guestOnly, err := faults.Parse(nil, []string{"guest-panic"})
	if err != nil {
		t.Fatal(err)
	}
	hooks, err = HooksFor(guestOnly.Decide(faults.DecideInput{Key: "ns/vm", Attempt: 1}))
	if err != nil {
		t.Fatal(err)
	}
	noKernel := &DomainEdit{Domain: &libvirtxml.Domain{}}
	if err := hooks.BuildDomain(noKernel); err == nil || !strings.Contains(err.Error(), "spec.domain.firmware.kernelBoot") {
		t.Errorf("a guest fault without a kernel boot: %v", err)
	}
}

func TestEmitter(t *testing.T) {
	var b strings.Builder
	e := NewEmitter(&b, launcherapi.FormatText, launcherapi.Event{VMI: "v", Namespace: "ns"})
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	if err := e.Emit(launcherapi.Event{Time: at, Event: launcherapi.EventRunning, Phase: launcherapi.PhaseRunning,
		Running: &launcherapi.RunningDetails{StartSeconds: 0.5, Ports: []launcherapi.PortForward{{Interface: "default", Protocol: "TCP", GuestPort: 80, HostAddress: "127.0.0.1", HostPort: 40123}}}}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != `02:04:05.123  Running     ns/v  ports=[{"guestPort":80,"hostIP":"127.0.0.1","hostPort":40123,"interface":"default","name":"","protocol":"TCP"}]  startSeconds=0.5`+"\n" {
		t.Fatalf("text line = %q", got)
	}
	sink := make(eventSink, 1)
	code := 10
	e = NewEmitter(sink, launcherapi.FormatJSON, launcherapi.Event{VMI: "v", Namespace: "ns", UID: "u", Attempt: 3})
	if err := e.Emit(launcherapi.Event{Time: at, Event: launcherapi.EventFailed, Phase: launcherapi.PhaseFailed, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	if ev := <-sink; ev.VMI != "v" || ev.UID != "u" || ev.Attempt != 3 || !ev.Time.Equal(at) || *ev.ExitCode != 10 {
		t.Errorf("JSON event %+v", ev)
	}
}
