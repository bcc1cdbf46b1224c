package backoff

import v1 "kubevirt.io/api/core/v1"

// Expectations are what the controller has asked for and not yet seen
// happen, the local counterpart of KubeVirt's controller expectations.
type Expectations struct {
	// StartPending is true from the decision to start a VMI until its
	// launcher reports a phase.
	StartPending bool
	// StopPending is true from the decision to stop a VMI until it is final.
	StopPending bool
}

// PrintableStatus computes the VM's printable status with KubeVirt's
// first-match order, restricted to the statuses a local controller meets:
//
//	Stopping          live VMI and a stop is pending
//	Running           VMI phase Running
//	Starting          no VMI but a start is pending, or VMI Pending/Scheduling/Scheduled
//	CrashLoopBackOff  no live VMI, no start pending, failure count > 0,
//	                  run strategy Always, RerunOnFailure or Once
//	Stopped           VMI final, or no VMI and no start pending
//	Unknown           anything else
func PrintableStatus(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, e Expectations) v1.VirtualMachinePrintableStatus {
	live := vmi != nil && !vmi.IsFinal()
	switch {
	case live && (e.StopPending || vmi.IsMarkedForDeletion()):
		return v1.VirtualMachineStatusStopping
	case vmi != nil && vmi.IsRunning():
		return v1.VirtualMachineStatusRunning
	case vmi == nil && e.StartPending,
		vmi != nil && (vmi.IsUnprocessed() || vmi.IsScheduling() || vmi.IsScheduled()):
		return v1.VirtualMachineStatusStarting
	case !live && !e.StartPending && isCrashLooping(vm):
		return v1.VirtualMachineStatusCrashLoopBackOff
	case vmi != nil && vmi.IsFinal(), vmi == nil && !e.StartPending:
		return v1.VirtualMachineStatusStopped
	}
	return v1.VirtualMachineStatusUnknown
}

func isCrashLooping(vm *v1.VirtualMachine) bool {
	strategy, err := vm.RunStrategy()
	if err != nil {
		return false
	}
	return vm.Status.StartFailure != nil && vm.Status.StartFailure.ConsecutiveFailCount > 0 && TracksFailures(strategy)
}
