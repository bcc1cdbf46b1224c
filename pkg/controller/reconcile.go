package controller

// Reconcile: the run strategy and the backoff rules decide whether to start or stop.

import (
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

func (w *worker) reconcile() {
	for range 3 {
		if !w.reconcileOnce() {
			return
		}
	}
}

// reconcileOnce applies the backoff rules and the run strategy once. It
// returns true when it changed something that needs another pass (a start
// that failed at once).
func (w *worker) reconcileOnce() bool {
	now := w.c.clock.Now()
	vm, vmi := w.rec.VM, w.rec.VMI
	w.noteChange(w.tracker.Sync(vm, vmi, &w.rec.History))
	strategy, _ := vm.RunStrategy()
	live := vmi != nil && !vmi.IsFinal()

	if live || w.rec.Launcher != nil {
		var wake time.Time
		if live && w.stopWanted(strategy, vmi) {
			w.stopVMI(now)
		}
		if w.rec.Launcher != nil && !live && w.killAt.IsZero() {
			// Final phase reported but the process lingers: give it the
			// same time a stop would get.
			w.killAt = now.Add(w.killAfter())
		}
		if !w.killAt.IsZero() {
			if !now.Before(w.killAt) {
				w.kill()
			} else {
				wake = w.killAt
			}
		}
		if at, ok := w.tracker.ResetCheckAt(vm, vmi); ok {
			wake = earliest(wake, at)
		}
		w.arm(wake, now)
		return false
	}
	w.expect.StopPending = false
	w.trimStopRequests()
	if !w.startWanted(strategy, vmi) {
		w.arm(time.Time{}, now)
		return false
	}
	if w.hasStartRequest() {
		return w.start(now, time.Time{})
	}
	at, ok := backoff.NextStart(vm, &w.rec.History)
	if !ok {
		w.arm(time.Time{}, now)
		return false
	}
	if at.After(now) {
		w.arm(at, now)
		return false
	}
	return w.start(now, at)
}

func (w *worker) stopWanted(strategy v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) bool {
	if strategy == v1.RunStrategyHalted || w.stopping {
		return true
	}
	for _, r := range w.rec.VM.Status.StateChangeRequests {
		if r.Action == v1.StopRequest && r.UID != nil && *r.UID == vmi.UID {
			return true
		}
	}
	return false
}

func (w *worker) startWanted(strategy v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) bool {
	if w.stopping {
		return false
	}
	switch strategy {
	case v1.RunStrategyAlways:
		return true
	case v1.RunStrategyRerunOnFailure:
		return vmi == nil || vmi.Status.Phase == v1.Failed || w.hasStartRequest()
	case v1.RunStrategyOnce:
		return vmi == nil || w.hasStartRequest()
	case v1.RunStrategyManual:
		return w.hasStartRequest()
	}
	// Halted: a start request has no meaning here (start turns Halted
	// into Always), so drop any.
	w.rec.VM.Status.StateChangeRequests = nil
	return false
}

func (w *worker) hasStartRequest() bool {
	for _, r := range w.rec.VM.Status.StateChangeRequests {
		if r.Action == v1.StartRequest {
			return true
		}
	}
	return false
}

// trimStopRequests drops stop requests for VMIs that are no longer live.
func (w *worker) trimStopRequests() {
	var keep []v1.VirtualMachineStateChangeRequest
	for _, r := range w.rec.VM.Status.StateChangeRequests {
		if r.Action != v1.StopRequest {
			keep = append(keep, r)
		}
	}
	w.rec.VM.Status.StateChangeRequests = keep
}

func (w *worker) popStartRequest() {
	reqs := w.rec.VM.Status.StateChangeRequests
	for i, r := range reqs {
		if r.Action == v1.StartRequest {
			w.rec.VM.Status.StateChangeRequests = append(reqs[:i:i], reqs[i+1:]...)
			return
		}
	}
}
