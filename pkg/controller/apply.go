package controller

// Apply: what a launcher reported (its events, its exit) and what the backoff tracker made of it.

import (
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// apply records what a launcher reported.
func (w *worker) apply(up launcherUpdate) {
	vmi := w.rec.VMI
	if vmi == nil || up.uid != vmi.UID {
		if up.exited && w.rec.Launcher != nil && w.rec.Launcher.UID == up.uid {
			w.rec.Launcher, w.launcher = nil, nil
		}
		return
	}
	now := w.c.clock.Now()
	for _, ev := range up.events {
		if ev.UID != "" && ev.UID != string(vmi.UID) {
			w.log.Warn("launcher event for another VMI ignored", "uid", ev.UID)
			continue
		}
		w.applyEvent(vmi, ev, now)
	}
	if !up.exited {
		return
	}
	w.rec.Launcher, w.launcher = nil, nil
	w.killAt = time.Time{}
	w.expect.StopPending = false
	if !vmi.IsFinal() {
		msg := fmt.Sprintf("virt-launcher %s before reporting a final phase", up.exitDesc)
		if l := lastLogLine(launcherapi.Dir(w.lastDir)); l != "" {
			msg += ": ..." + l
		}
		setPhase(vmi, v1.Failed, now)
		vmi.Status.Reason = "LauncherCrashed"
		setReady(vmi, false, "LauncherCrashed", msg, now)
	}
	ev := Event{Event: EventExited, Attempt: w.rec.Attempt, VMIUID: string(vmi.UID), Phase: string(vmi.Status.Phase), Reason: vmi.Status.Reason, Message: up.exitDesc}
	if up.exitCode >= 0 {
		code := up.exitCode
		ev.ExitCode = &code
	}
	w.note(ev)
	if vmi.DeletionTimestamp != nil {
		// A deleted VMI goes with its launcher, as upstream's VMI object
		// goes with its pod: a stopped VMI is never counted.
		w.rec.VMI = nil
	}
}

func (w *worker) applyEvent(vmi *v1.VirtualMachineInstance, ev launcherapi.Event, now time.Time) {
	final := vmi.IsFinal()
	switch ev.Event {
	case launcherapi.EventScheduled:
		if !final {
			setPhase(vmi, v1.Scheduled, now)
		}
	case launcherapi.EventRunning:
		if !final {
			setPhase(vmi, v1.Running, now)
		}
	case launcherapi.EventGuestReady:
		if !final {
			setReady(vmi, true, "GuestReady", ev.Message, now)
		}
	case launcherapi.EventSucceeded, launcherapi.EventFailed:
		if !final {
			setPhase(vmi, v1.VirtualMachineInstancePhase(ev.Event), now)
			vmi.Status.Reason = ev.Reason
			setReady(vmi, false, ev.Reason, ev.Message, now)
		}
	}
	w.note(Event{Event: EventKind(ev.Event), Attempt: w.rec.Attempt, VMIUID: string(vmi.UID), Reason: ev.Reason, Message: ev.Message, ExitCode: ev.ExitCode})
}

func (w *worker) noteChange(ch backoff.Change) {
	switch {
	case ch.Counted:
		w.rec.Delay, w.rec.ScaledDelay = ch.Delay, ch.ScaledDelay
		ev := Event{Event: EventBackoffPlanned, Reason: ch.Reason, Delay: ch.Delay.String(),
			ScaledDelay: ch.ScaledDelay.String(), ScaledDelayNs: ch.ScaledDelay.Nanoseconds()}
		if !ch.RetryAfter.IsZero() {
			// The failure time the delay was counted from.
			ev.Time = ch.RetryAfter.Add(-ch.ScaledDelay)
		}
		if ch.GaveUp {
			ev.Event = EventGaveUp
			ev.Delay, ev.ScaledDelay, ev.ScaledDelayNs = "", "", 0
		}
		w.note(ev)
	case ch.Cleared:
		w.rec.Delay, w.rec.ScaledDelay = 0, 0
		w.note(Event{Event: EventRecordCleared, Reason: ch.Reason})
	}
}
