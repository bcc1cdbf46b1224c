package backoff

import (
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"
)

// Step is what upstream's syncRunStrategy decides for one reconcile of a
// VM, as data: which VMI to delete, which state-change request to add, and
// whether to start a new VMI now or wait for the backoff.
type Step struct {
	// DeleteVMI asks to delete (stop) the current VMI.
	DeleteVMI bool
	// AddStartRequest asks to append {action: Start} to
	// status.stateChangeRequests: RerunOnFailure after a Failed VMI, so
	// that the request stands for the whole backoff.
	AddStartRequest bool
	// StartVMI asks to create a new VMI now.
	StartVMI bool
	// Wait, when positive, is the backoff still to run before a start:
	// check again after it.
	Wait time.Duration
	// SetRunStrategy, when not empty, is the run strategy the spec must
	// be changed to: Halted with a pending start request becomes Always
	// (spec.running = true for a VM that uses spec.running).
	SetRunStrategy v1.VirtualMachineRunStrategy
	// Reason says in a few words why.
	Reason string
}

// NextStep is upstream's syncRunStrategy for the VM and its current VMI
// (nil when there is none) at now, per run strategy:
//
//	Always          a Failed/Succeeded VMI or one with a stop request for its
//	                UID is deleted; with no VMI, start once the backoff is
//	                over (a pending start request changes nothing)
//	RerunOnFailure  a VMI that Failed, Succeeded or has a stop request is
//	                deleted unless already being deleted, and after Failed
//	                {action: Start} is added; with no VMI, start only with a
//	                pending start request (or when status.runStrategy is
//	                not RerunOnFailure yet), and only once the backoff is
//	                over: the request never skips the backoff
//	Manual          a VMI with a stop request is deleted; with no VMI, a
//	                pending start request starts at once
//	Halted          any VMI is deleted; with no VMI, a pending start request
//	                turns the spec to Always (which is why a Halted edit
//	                during RerunOnFailure's backoff comes back as Always)
//	Once            with no VMI, start at once; a VMI is never deleted
//	WaitAsReceiver  with no VMI, start at once
//
// A run strategy that cannot be determined does nothing. The wait is
// [TimeLeft] (the "exact-time" deviation), not upstream's whole seconds.
// Deleting a VMI that already has a deletion timestamp is a no-op upstream,
// so DeleteVMI is false for one.
func NextStep(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, now time.Time) Step {
	strategy, err := vm.RunStrategy()
	if err != nil {
		return Step{Reason: fmt.Sprintf("run strategy cannot be determined: %v", err)}
	}
	deletable := vmi != nil && vmi.DeletionTimestamp == nil
	stopRequested := vmi != nil && hasStopRequestFor(vm, vmi)
	startAfterBackoff := func(why string) Step {
		if left := TimeLeft(vm, now); left > 0 {
			return Step{Wait: left, Reason: fmt.Sprintf("start-failure backoff: %s left", left)}
		}
		return Step{StartVMI: true, Reason: why}
	}
	switch strategy {
	case v1.RunStrategyAlways:
		if vmi != nil {
			if stopRequested || vmi.IsFinal() {
				return Step{DeleteVMI: deletable, Reason: fmt.Sprintf("VMI %s %s: restart it", vmi.UID, endedOrStopped(vmi, stopRequested))}
			}
			return Step{Reason: "VMI is live"}
		}
		return startAfterBackoff("runStrategy Always and no VMI")
	case v1.RunStrategyRerunOnFailure:
		if vmi != nil {
			failed := vmi.Status.Phase == v1.Failed
			if deletable && (stopRequested || failed || vmi.Status.Phase == v1.Succeeded) {
				return Step{DeleteVMI: true, AddStartRequest: failed,
					Reason: fmt.Sprintf("VMI %s %s", vmi.UID, endedOrStopped(vmi, stopRequested))}
			}
			return Step{Reason: "VMI is live or being deleted"}
		}
		if !HasStartRequest(vm) && vm.Status.RunStrategy == strategy {
			return Step{Reason: "no start request"}
		}
		return startAfterBackoff("runStrategy RerunOnFailure with a start request")
	case v1.RunStrategyManual:
		if vmi != nil {
			if stopRequested {
				return Step{DeleteVMI: deletable, Reason: fmt.Sprintf("stop request for VMI %s", vmi.UID)}
			}
			return Step{Reason: "VMI exists"}
		}
		if HasStartRequest(vm) {
			return Step{StartVMI: true, Reason: "start request"}
		}
		return Step{Reason: "no start request"}
	case v1.RunStrategyHalted:
		if vmi != nil {
			return Step{DeleteVMI: deletable, Reason: "runStrategy Halted"}
		}
		if HasStartRequest(vm) {
			return Step{SetRunStrategy: v1.RunStrategyAlways, Reason: "start request on a Halted VM"}
		}
		return Step{Reason: "runStrategy Halted"}
	case v1.RunStrategyOnce, v1.RunStrategyWaitAsReceiver:
		if vmi == nil {
			return Step{StartVMI: true, Reason: fmt.Sprintf("runStrategy %s and no VMI", strategy)}
		}
		return Step{Reason: "VMI exists"}
	}
	return Step{Reason: fmt.Sprintf("unknown runStrategy %q", strategy)}
}

func endedOrStopped(vmi *v1.VirtualMachineInstance, stopRequested bool) string {
	if stopRequested {
		return "has a stop request"
	}
	return "ended " + string(vmi.Status.Phase)
}

// HasStartRequest reports whether the first state-change request is a
// start, as upstream's hasStartRequest (later ones are not looked at).
func HasStartRequest(vm *v1.VirtualMachine) bool {
	reqs := vm.Status.StateChangeRequests
	return len(reqs) > 0 && reqs[0].Action == v1.StartRequest
}

// hasStopRequestFor reports whether the first state-change request is a
// stop for this VMI's UID.
func hasStopRequestFor(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) bool {
	reqs := vm.Status.StateChangeRequests
	return len(reqs) > 0 && reqs[0].Action == v1.StopRequest && reqs[0].UID != nil && *reqs[0].UID == vmi.UID
}

// TrimFirstRequest is upstream's isTrimFirstChangeRequestNeeded: whether
// the first state-change request has been carried out and must be popped.
// A stop is done when there is no VMI, the request has no UID, or the VMI
// has another UID; a start is done once a live VMI, not being deleted,
// exists. So RerunOnFailure's {action: Start} stays for the whole backoff
// (there is no VMI) and goes once the new VMI exists.
func TrimFirstRequest(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) bool {
	reqs := vm.Status.StateChangeRequests
	if len(reqs) == 0 {
		return false
	}
	switch r := reqs[0]; r.Action {
	case v1.StopRequest:
		return vmi == nil || r.UID == nil || *r.UID != vmi.UID
	case v1.StartRequest:
		return vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	}
	return false
}

// StatusRunStrategy is the value upstream's updateStatus gives
// status.runStrategy: the spec's run strategy once a VMI has existed
// (status.runStrategy already set, or a VMI now), else it stays empty, so
// that status.runStrategy tells whether the VM was ever started.
func StatusRunStrategy(vm *v1.VirtualMachine, vmiExists bool) v1.VirtualMachineRunStrategy {
	if vm.Status.RunStrategy == "" && !vmiExists {
		return ""
	}
	s, _ := vm.RunStrategy()
	return s
}
