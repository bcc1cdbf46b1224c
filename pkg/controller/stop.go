package controller

// Stop: SIGTERM to a live launcher, SIGKILL when its time is up, and the controller's own shutdown.

import (
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

// killAfter is how long a launcher gets after SIGTERM before SIGKILL:
// its grace period plus time to clean up.
func (w *worker) killAfter() time.Duration { return w.gracePeriod() + w.c.cfg.KillMargin }

func (w *worker) stopVMI(now time.Time) {
	if w.expect.StopPending {
		return
	}
	w.expect.StopPending = true
	w.killAt = now.Add(w.killAfter())
	if err := w.signal(syscall.SIGTERM); err != nil {
		w.log.Info("stopping VMI", "err", err)
	}
}

// signal sends sig to the live launcher, if there is one.
func (w *worker) signal(sig syscall.Signal) error {
	if w.launcher == nil {
		return nil
	}
	return w.launcher.Signal(sig)
}

func (w *worker) kill() {
	w.killAt = time.Time{}
	if ref := w.rec.Launcher; ref != nil {
		w.log.Warn("launcher did not exit in time, sending SIGKILL", "pid", ref.PID)
		if err := w.signal(syscall.SIGKILL); err != nil {
			w.log.Info("killing launcher", "err", err)
		}
	}
}

// shutdown ends the worker with the controller. With StopOnExit a live
// launcher is stopped gracefully and its VMI dropped, so that the next run
// starts the VM afresh without counting the shutdown as a failure;
// otherwise the launcher is left running and adopted by the next run.
func (w *worker) shutdown() {
	defer func() {
		w.persist()
		w.flushEvents()
	}()
	if !w.c.cfg.StopOnExit || w.rec.Launcher == nil {
		return
	}
	w.stopping = true
	now := w.c.clock.Now()
	if vmi := w.live(); vmi != nil {
		w.stopVMI(now)
	} else {
		w.killAt = now.Add(w.killAfter())
	}
	deadline := w.c.clock.NewTimer(w.killAfter() + w.c.cfg.KillMargin)
	defer deadline.Stop()
	for w.rec.Launcher != nil {
		select {
		case up := <-w.updates:
			w.apply(up)
		case <-w.timerC():
			w.timer, w.timerAt = nil, time.Time{}
			w.kill()
		case <-deadline.C():
			w.log.Error("launcher still running at shutdown", "pid", w.rec.Launcher.PID)
			return
		}
		if !w.killAt.IsZero() && w.timer == nil {
			w.arm(w.killAt, w.c.clock.Now())
		}
	}
	w.note(Event{Event: EventStoppedForShutdown, Message: "VMI stopped because the controller is shutting down"})
	w.rec.VMI = nil
	w.expect = backoff.Expectations{}
	w.updateStatus()
}
