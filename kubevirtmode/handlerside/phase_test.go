package handlerside

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func TestPhaseFollowsVirtHandlersRule(t *testing.T) {
	zero := int64(0)
	acpi := func(d *api.Domain) *api.Domain {
		d.Spec.Features = &api.Features{ACPI: &api.FeatureEnabled{}}
		return d
	}
	dom := func(s api.LifeCycle, r api.StateChangeReason) *api.Domain {
		d := api.NewMinimalDomain("vm")
		d.SetState(s, r)
		return d
	}
	vmi := &v1.VirtualMachineInstance{}
	noGrace := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{TerminationGracePeriodSeconds: &zero}}
	for _, tc := range []struct {
		name          string
		d             *api.Domain
		vmi           *v1.VirtualMachineInstance
		running       bool
		event, reason string
	}{
		{"defined, not started", dom(api.Shutoff, api.ReasonUnknown), vmi, false, "", ""},
		{"start failed", dom(api.Shutoff, api.ReasonFailed), vmi, false, "", ""},
		{"running", dom(api.Running, api.ReasonUnknown), vmi, false, launcherapi.EventRunning, ""},
		{"paused", dom(api.Paused, api.ReasonPausedUser), vmi, true, launcherapi.EventRunning, ""},
		{"guest shutdown", dom(api.Shutoff, api.ReasonShutdown), vmi, true, launcherapi.EventSucceeded, launcherapi.ReasonGuestShutdown},
		{"crashed", dom(api.Shutoff, api.ReasonCrashed), vmi, true, launcherapi.EventFailed, launcherapi.ReasonVMCrashed},
		{"panicked", dom(api.Crashed, api.ReasonPanicked), vmi, true, launcherapi.EventFailed, launcherapi.ReasonGuestPanicked},
		{"destroyed without ACPI", dom(api.Shutoff, api.ReasonDestroyed), vmi, true, launcherapi.EventSucceeded, launcherapi.ReasonStopped},
		{"destroyed under ACPI", acpi(dom(api.Shutoff, api.ReasonDestroyed)), vmi, true, launcherapi.EventFailed, launcherapi.ReasonStopped},
		{"destroyed under ACPI, no grace period", acpi(dom(api.Shutoff, api.ReasonDestroyed)), noGrace, true, launcherapi.EventSucceeded, launcherapi.ReasonStopped},
		{"gone after Running", nil, vmi, true, launcherapi.EventFailed, launcherapi.ReasonVMCrashed},
		{"gone before Running", nil, vmi, false, "", ""},
	} {
		event, reason := Phase(tc.d, tc.vmi, tc.running)
		if event != tc.event || reason != tc.reason {
			t.Errorf("%s: got %q %q, want %q %q", tc.name, event, reason, tc.event, tc.reason)
		}
	}
}
