package monitor

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// newDomain is the domain of vmi as KubeVirt's launcher reports it right
// after defining it: named namespace_name, the VMI's UID in its object
// meta and its KubeVirt metadata, the grace period, state Shutoff/Unknown.
func newDomain(vmi *v1.VirtualMachineInstance, graceSeconds int64) *api.Domain {
	d := api.NewMinimalDomainWithNS(vmi.Namespace, vmi.Name)
	d.ObjectMeta.UID = vmi.UID
	d.Spec.Metadata.KubeVirt = api.KubeVirtMetadata{
		UID:         vmi.UID,
		GracePeriod: &api.GracePeriodMetadata{DeletionGracePeriodSeconds: graceSeconds},
	}
	d.SetState(api.Shutoff, api.ReasonUnknown)
	return d
}

// graceSeconds is the VMI's terminationGracePeriodSeconds, else KubeVirt's
// default of 30 s.
func graceSeconds(vmi *v1.VirtualMachineInstance) int64 {
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return v1.DefaultGracePeriodSeconds
}

// finalState maps our launcher's final event to the domain state libvirt
// gives KubeVirt's launcher in the same situation, so that virt-handler's
// calculateVmPhaseForStatusReason (pkg/virt-handler/vm.go) reaches the
// same VMI phase:
//   - Succeeded GuestShutdown, or Stopped by ACPI: Shutoff/Shutdown (Succeeded);
//   - Stopped with StopDestroyed (our launcher destroyed it after the
//     grace period, or when it could not press the power button):
//     Shutoff/Destroyed (Failed under ACPI, as upstream); a stop before
//     the domain was running stays Shutoff/Shutdown;
//   - Failed VMCrashed: Shutoff/Crashed; GuestPanicked: Crashed/Panicked (Failed);
//   - a failure before Running (LibvirtError, QemuFailed, QemuStartTimeout,
//     InternalError): Shutoff/Failed, which leaves the phase alone while
//     SyncVirtualMachine reports the error.
func finalState(ev launcherapi.Event, wasRunning bool) (api.LifeCycle, api.StateChangeReason) {
	switch {
	case ev.Phase == launcherapi.PhaseSucceeded && ev.Stopped != nil && ev.Stopped.How == launcherapi.StopDestroyed:
		return api.Shutoff, api.ReasonDestroyed
	case ev.Phase == launcherapi.PhaseSucceeded:
		return api.Shutoff, api.ReasonShutdown
	case ev.Reason == launcherapi.ReasonGuestPanicked:
		return api.Crashed, api.ReasonPanicked
	case ev.Reason == launcherapi.ReasonVMCrashed || wasRunning:
		return api.Shutoff, api.ReasonCrashed
	default:
		return api.Shutoff, api.ReasonFailed
	}
}

// markDeleted is the final delete notification's domain: NoState/
// NonExistent with a deletion timestamp, as KubeVirt's launcher sends it
// once the domain is undefined.
func markDeleted(d *api.Domain, now metav1.Time) {
	d.SetState(api.NoState, api.ReasonNonExistent)
	d.ObjectMeta.DeletionTimestamp = &now
}
