package controller

// Reconcile: upstream's syncRunStrategy as pkg/backoff's NextStep, carried
// out on launcher processes.

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

func (w *worker) reconcile() {
	for range 8 {
		if !w.reconcileOnce() {
			return
		}
	}
}

// reconcileOnce is one pass of upstream's VM reconcile, in its order: the
// tracker counts (or clears) with the VMI still in hand, then NextStep
// says what to delete, request or start, then the first state-change
// request is trimmed once carried out. It returns true when it changed
// something that needs another pass (a VMI dropped, a spec changed).
func (w *worker) reconcileOnce() bool {
	now := w.c.clock.Now()
	vm := w.rec.VM
	w.noteChange(w.tracker.Sync(vm, w.rec.VMI, &w.rec.History))
	if w.stopping {
		if vmi := w.live(); vmi != nil {
			w.stopVMI(now)
		}
		w.arm(w.killAt, now)
		return false
	}
	step := backoff.NextStep(vm, w.rec.VMI, now)
	again := false
	if step.DeleteVMI {
		again = w.deleteVMI(now)
	}
	if step.AddStartRequest && !backoff.HasStartRequest(vm) {
		w.request(v1.StartRequest, nil)
	}
	if step.SetRunStrategy != "" {
		w.setStrategy(step.SetRunStrategy)
		again = true
	}
	vmi := w.rec.VMI
	if backoff.TrimFirstRequest(vm, vmi) {
		vm.Status.StateChangeRequests = vm.Status.StateChangeRequests[1:]
		if len(vm.Status.StateChangeRequests) == 0 {
			vm.Status.StateChangeRequests = nil
		}
		again = true
	}
	if again {
		return true
	}
	if vmi != nil || w.rec.Launcher != nil {
		return w.tend(vmi, now)
	}
	w.expect.StopPending = false
	switch {
	case step.Wait > 0:
		w.arm(now.Add(step.Wait), now)
		return false
	case !step.StartVMI:
		w.arm(time.Time{}, now)
		return false
	}
	planned := time.Time{}
	if backoff.TracksFailures(mustStrategy(vm)) {
		at, ok := backoff.NextStart(vm, &w.rec.History)
		if !ok {
			// The give-up rule (off by default) fired.
			w.arm(time.Time{}, now)
			return false
		}
		planned = at
	}
	// Another pass, as upstream's next reconcile: it sees the new VMI
	// and trims the start request it carried out, before a launcher that
	// crashes at once can make the VMI final.
	w.start(now, planned)
	return true
}

// tend looks after an existing VMI or a launcher that is still there: the
// SIGKILL deadline of a stopping launcher, a launcher that could not be
// created (retried), and the reset check of CountRunningFailuresWithin.
func (w *worker) tend(vmi *v1.VirtualMachineInstance, now time.Time) bool {
	var wake time.Time
	if w.rec.Launcher != nil && (vmi == nil || vmi.IsFinal()) && w.killAt.IsZero() {
		// Final phase reported (or the VMI deleted) but the process
		// lingers: give it the time a stop would get.
		w.killAt = now.Add(w.killAfter())
	}
	if !w.killAt.IsZero() {
		if !now.Before(w.killAt) {
			w.kill()
		} else {
			wake = w.killAt
		}
	}
	if vmi != nil && w.rec.Launcher == nil && !vmi.IsFinal() && vmi.DeletionTimestamp == nil {
		// A launcher that could not be created: retry it for the same
		// VMI, which stays Pending and is not counted.
		if !now.Before(w.createRetryAt) {
			return w.createLauncher(vmi, now, time.Time{})
		}
		wake = earliest(wake, w.createRetryAt)
	}
	if at, ok := w.tracker.ResetCheckAt(w.rec.VM, vmi); ok {
		wake = earliest(wake, at)
	}
	w.arm(wake, now)
	return false
}

// deleteVMI is upstream's VMI deletion: a VMI with a live launcher gets a
// deletion timestamp and its launcher SIGTERM (the VMI goes once the
// launcher is gone); one without a launcher is dropped at once. It
// returns true when the VMI was dropped.
func (w *worker) deleteVMI(now time.Time) bool {
	vmi := w.rec.VMI
	if vmi == nil {
		return false
	}
	if vmi.DeletionTimestamp == nil {
		t := metav1.NewTime(now)
		vmi.DeletionTimestamp = &t
	}
	if w.rec.Launcher == nil {
		w.rec.VMI = nil
		return true
	}
	if !vmi.IsFinal() {
		w.stopVMI(now)
	}
	return false
}

// mustStrategy is the VM's run strategy, or "" when it cannot be
// determined.
func mustStrategy(vm *v1.VirtualMachine) v1.VirtualMachineRunStrategy {
	s, _ := vm.RunStrategy()
	return s
}
