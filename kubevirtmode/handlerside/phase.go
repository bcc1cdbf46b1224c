package handlerside

import (
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Phase is the VMI phase virt-handler v1.6.0 gives a domain state
// (calculateVmPhaseForStatusReason and isACPIEnabled in
// pkg/virt-handler/vm.go, which are methods of virt-handler's controller
// and cannot be called from here), as a launcherapi event: "" leaves the
// phase alone, EventRunning, EventSucceeded or EventFailed with the
// reason our launcher gives the same end. A nil domain (deleted) of a VMI
// that was running fails it.
func Phase(d *api.Domain, vmi *v1.VirtualMachineInstance, wasRunning bool) (event, reason string) {
	if d == nil {
		if wasRunning {
			return launcherapi.EventFailed, launcherapi.ReasonVMCrashed
		}
		return "", ""
	}
	switch d.Status.Status {
	case api.Shutoff, api.Crashed:
		switch d.Status.Reason {
		case api.ReasonCrashed:
			return launcherapi.EventFailed, launcherapi.ReasonVMCrashed
		case api.ReasonPanicked:
			return launcherapi.EventFailed, launcherapi.ReasonGuestPanicked
		case api.ReasonDestroyed:
			if acpiEnabled(vmi, d) {
				// The guest was asked to shut down and was destroyed
				// after the grace period.
				return launcherapi.EventFailed, launcherapi.ReasonStopped
			}
			return launcherapi.EventSucceeded, launcherapi.ReasonStopped
		case api.ReasonShutdown, api.ReasonSaved, api.ReasonFromSnapshot:
			return launcherapi.EventSucceeded, launcherapi.ReasonGuestShutdown
		}
	case api.Paused:
		if d.Status.Reason == api.ReasonPausedPostcopyFailed {
			return launcherapi.EventFailed, launcherapi.ReasonVMCrashed
		}
		return launcherapi.EventRunning, ""
	case api.Running, api.Blocked, api.PMSuspended:
		return launcherapi.EventRunning, ""
	}
	return "", ""
}

// acpiEnabled is virt-handler's isACPIEnabled: a grace period (a VMI
// without terminationGracePeriodSeconds has the default one) and ACPI in
// the domain.
func acpiEnabled(vmi *v1.VirtualMachineInstance, d *api.Domain) bool {
	grace := vmi.Spec.TerminationGracePeriodSeconds
	return (grace == nil || *grace != 0) && d.Spec.Features != nil && d.Spec.Features.ACPI != nil
}
