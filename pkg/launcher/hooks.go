package launcher

/*
One launch, and the points (faults.Point, in brackets) where hooks act:

	VMI ──▶ domain XML ──[build-domain]──▶ Scheduled: the start timeout is armed
	                                          │
	     [before-libvirt] ──▶ open libvirt ───┤ fails: Failed/LibvirtError (11)
	     [before-define] ──▶ [define] define ─┤ fails: Failed/LibvirtError (11)
	     [before-start] ──▶ [start] start ────┤ fails: Failed/LibvirtError (11); QEMU refused: Failed/QemuFailed (12)
	     [after-start]                        │
	                                          ▼
	 Failed/QemuStartTimeout (10) ◀── waiting for Running ──▶ QEMU exits: Failed/QemuFailed (12)
	     the timer fires first                │
	                                       Running ──[after-running]
	                                          │       GuestReady when the console shows the marker
	     the guest powers off ────────────────┼──▶ Succeeded/GuestShutdown (0)
	     pvpanic, libvirt "crashed" ──────────┼──▶ Failed/GuestPanicked (13)
	     QEMU dies ───────────────────────────┼──▶ Failed/VMCrashed (13)
	     SIGTERM/SIGINT (ctx cancelled) ──────┴──▶ ACPI power button: Succeeded/Stopped (0) when the guest
	                                               stops within the grace period, else destroyed after it

At each point the lifecycle calls the hooks placed there (Hooks, built from
the fault decisions by HooksFor), through that point's interface below, in
the order they were placed. A hook acts at exactly one point; what it
starts for later (a resume, a kill) it schedules with Site.After.
*/

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Hook acts at one lifecycle point: it implements that point's interface.
type Hook interface {
	// Name names the hook in its FaultFired events (the fault's name).
	Name() string
}

// BuildDomainHook acts at faults.PointBuildDomain: once, after the VMI
// became domain XML, before the Scheduled event; nothing runs yet, so
// there is no context. It edits the domain through e. An error means the
// VMI cannot take the hook: the launch ends with exit 5 before it starts.
type BuildDomainHook interface {
	Hook
	BuildDomain(e *DomainEdit) error
}

// BeforeLibvirtHook acts at faults.PointBeforeLibvirt: after Scheduled,
// before libvirt is opened. ctx is cancelled when a stop was requested
// (SIGTERM/SIGINT); a hook that waits returns at once then.
type BeforeLibvirtHook interface {
	Hook
	BeforeLibvirt(ctx context.Context, s *Site)
}

// BeforeDefineHook acts at faults.PointBeforeDefine: libvirt is open, the
// domain not yet defined. ctx is as for BeforeLibvirtHook.
type BeforeDefineHook interface {
	Hook
	BeforeDefine(ctx context.Context, s *Site)
}

// DefineHook acts at faults.PointDefine, right before libvirt's define
// call. A non-nil error is what the call returns: the launch ends
// Failed/LibvirtError (exit 11) with nothing defined. ctx is as for
// BeforeLibvirtHook.
type DefineHook interface {
	Hook
	Define(ctx context.Context, s *Site) error
}

// BeforeStartHook acts at faults.PointBeforeStart: the domain is defined,
// QEMU not started. ctx is as for BeforeLibvirtHook.
type BeforeStartHook interface {
	Hook
	BeforeStart(ctx context.Context, s *Site)
}

// StartHook acts at faults.PointStart, right before libvirt's start call;
// it may change how QEMU starts through o. A non-nil error is what the
// call returns: the launch ends Failed/LibvirtError (exit 11). ctx is as
// for BeforeLibvirtHook.
type StartHook interface {
	Hook
	Start(ctx context.Context, s *Site, o *StartOptions) error
}

// AfterStartHook acts at faults.PointAfterStart: libvirt started QEMU and
// the lifecycle is about to wait for Running. It schedules what acts later
// with s.After. ctx ends when the launch ends.
type AfterStartHook interface {
	Hook
	AfterStart(ctx context.Context, s *Site)
}

// AfterRunningHook acts at faults.PointAfterRunning: right after the
// Running event. ctx is cancelled when a stop was requested.
type AfterRunningHook interface {
	Hook
	AfterRunning(ctx context.Context, s *Site)
}

// acts tells whether h implements the interface of point p.
func acts(h Hook, p faults.Point) bool {
	var ok bool
	switch p {
	case faults.PointBuildDomain:
		_, ok = h.(BuildDomainHook)
	case faults.PointBeforeLibvirt:
		_, ok = h.(BeforeLibvirtHook)
	case faults.PointBeforeDefine:
		_, ok = h.(BeforeDefineHook)
	case faults.PointDefine:
		_, ok = h.(DefineHook)
	case faults.PointBeforeStart:
		_, ok = h.(BeforeStartHook)
	case faults.PointStart:
		_, ok = h.(StartHook)
	case faults.PointAfterStart:
		_, ok = h.(AfterStartHook)
	case faults.PointAfterRunning:
		_, ok = h.(AfterRunningHook)
	}
	return ok
}

// Hooks are hooks placed at their lifecycle points. The zero value has none.
type Hooks struct {
	at map[faults.Point][]Hook
}

// Place adds h at point p; h must implement p's interface.
func (hs *Hooks) Place(p faults.Point, h Hook) error {
	if !acts(h, p) {
		return fmt.Errorf("%s cannot act at lifecycle point %s", h.Name(), p)
	}
	if hs.at == nil {
		hs.at = map[faults.Point][]Hook{}
	}
	hs.at[p] = append(hs.at[p], h)
	return nil
}

// At returns the hooks placed at p, in order.
func (hs Hooks) At(p faults.Point) []Hook { return hs.at[p] }

// BuildDomain runs the build-domain hooks on e: the lifecycle's first
// point, which the caller runs before Run (a dry run stops after it).
func (hs Hooks) BuildDomain(e *DomainEdit) error {
	for _, h := range hs.At(faults.PointBuildDomain) {
		if err := h.(BuildDomainHook).BuildDomain(e); err != nil {
			return err
		}
	}
	return nil
}

// DomainEdit is what a BuildDomainHook works on.
type DomainEdit struct {
	// Domain is the domain about to be defined.
	Domain *libvirtxml.Domain
	// Scratch is a folder for files the domain refers to, removed with the
	// launch.
	Scratch string

	announce []fired
	hold     time.Duration
}

type fired struct {
	name, message string
	details       *launcherapi.FaultDetails
}

// AnnounceAtStart queues h's FaultFired event for when QEMU is started,
// which is when an edit of the domain takes effect.
func (e *DomainEdit) AnnounceAtStart(h Hook, message string, details *launcherapi.FaultDetails) {
	e.announce = append(e.announce, fired{h.Name(), message, details})
}

// HoldStart holds QEMU's start back for at least d.
func (e *DomainEdit) HoldStart(d time.Duration) { e.hold = max(e.hold, d) }

// StartOptions say how the start point starts QEMU.
type StartOptions struct {
	// Paused starts QEMU with its vCPUs stopped.
	Paused bool
	// Delay holds the start back that long.
	Delay time.Duration
}

// Site is what a hook may do where it acts. Its methods run on the
// lifecycle's goroutine, as do the functions given to After.
type Site struct {
	l     *lifecycle
	hook  Hook
	point faults.Point
}

// Point is where the hook acts.
func (s *Site) Point() faults.Point { return s.point }

// Fire writes the hook's FaultFired event.
func (s *Site) Fire(message string, details *launcherapi.FaultDetails) {
	s.l.fire(fired{s.hook.Name(), message, details})
}

// Wait waits d on the lifecycle's clock and reports whether it did; it
// returns false as soon as ctx ends.
func (s *Site) Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := s.l.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// Crash kills the launcher the way a real crash does: a panic on a fresh
// goroutine, so that no deferred cleanup of the launch runs (its reaper
// cleans up). It does not return.
func (s *Site) Crash() {
	msg := fmt.Sprintf("Simulated virt-launcher crash (fault %s at %s)", s.hook.Name(), s.point)
	s.l.cfg.Crash(msg)
}

// After runs fn on the lifecycle's goroutine d after the domain started
// (or d from now, once it has), unless the launch ended first.
func (s *Site) After(d time.Duration, fn func()) {
	s.l.after(d, fn)
}

// Resume resumes the domain's vCPUs.
func (s *Site) Resume() error {
	if s.l.dom == nil {
		return fmt.Errorf("%s: no domain to resume at %s", s.hook.Name(), s.point)
	}
	return s.l.dom.Resume()
}

// Kill sends sig to the domain's QEMU; the launch's final message then
// says QEMU was killed by sig.
func (s *Site) Kill(sig syscall.Signal) error {
	if s.l.dom == nil {
		return fmt.Errorf("%s: no QEMU to kill at %s", s.hook.Name(), s.point)
	}
	s.l.killed = signalName(sig)
	return s.l.dom.Kill(sig)
}

// at runs the hooks of a point without a result of their own.
func (l *lifecycle) at(ctx context.Context, p faults.Point) {
	for _, h := range l.cfg.Hooks.At(p) {
		s := &Site{l: l, hook: h, point: p}
		switch p {
		case faults.PointBeforeLibvirt:
			h.(BeforeLibvirtHook).BeforeLibvirt(ctx, s)
		case faults.PointBeforeDefine:
			h.(BeforeDefineHook).BeforeDefine(ctx, s)
		case faults.PointBeforeStart:
			h.(BeforeStartHook).BeforeStart(ctx, s)
		case faults.PointAfterStart:
			h.(AfterStartHook).AfterStart(ctx, s)
		case faults.PointAfterRunning:
			h.(AfterRunningHook).AfterRunning(ctx, s)
		}
	}
}

// defineHooks runs the define hooks; the first error wins.
func (l *lifecycle) defineHooks(ctx context.Context) error {
	for _, h := range l.cfg.Hooks.At(faults.PointDefine) {
		if err := h.(DefineHook).Define(ctx, &Site{l: l, hook: h, point: faults.PointDefine}); err != nil {
			return err
		}
	}
	return nil
}

// startHooks runs the start hooks; the first error wins.
func (l *lifecycle) startHooks(ctx context.Context, o *StartOptions) error {
	for _, h := range l.cfg.Hooks.At(faults.PointStart) {
		if err := h.(StartHook).Start(ctx, &Site{l: l, hook: h, point: faults.PointStart}, o); err != nil {
			return err
		}
	}
	return nil
}

// final is the launch's result as its final event.
func (r Result) final(at time.Time) launcherapi.Event {
	code := int(r.ExitCode)
	ev := launcherapi.Event{Time: at, Event: launcherapi.EventFailed, Phase: r.Phase, Reason: r.Reason, Message: r.Message, ExitCode: &code}
	if r.Phase == launcherapi.PhaseSucceeded {
		ev.Event = launcherapi.EventSucceeded
	}
	if r.Stop != "" {
		ev.Stopped = &launcherapi.StoppedDetails{How: r.Stop}
	}
	return ev
}
