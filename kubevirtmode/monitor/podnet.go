package monitor

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/network/cache"
	netsetup "kubevirt.io/kubevirt/pkg/network/setup"
	netvmispec "kubevirt.io/kubevirt/pkg/network/vmispec"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// phase2 is KubeVirt v1.6.0's launcher-side pod network setup, as its
// SyncVMI calls it (pkg/virt-launcher/virtwrap/manager.go): for each
// network of a non-absent interface, its NIC's libvirt interface is
// completed from the pod's links (MAC, MTU, the tap as target) and, for
// masquerade and bridge, KubeVirt's DHCP server is started on the pod's
// bridge (k6t-eth0), once per pod. The Monitor's default phase2: the
// real one changes the pod's network namespace, so unit tests give theirs.
func kubevirtPhase2(vmi *v1.VirtualMachineInstance, attachments map[string]string, domain *api.Domain) error {
	ifaces := netvmispec.FilterInterfacesSpec(vmi.Spec.Domain.Devices.Interfaces, func(iface v1.Interface) bool {
		return iface.State != v1.InterfaceStateAbsent
	})
	nets := netvmispec.FilterNetworksByInterfaces(vmi.Spec.Networks, ifaces)
	return netsetup.NewVMNetworkConfigurator(vmi, cache.CacheCreator{}, netsetup.WithDomainAttachments(attachments)).
		SetupPodNetworkPhase2(domain, nets)
}

// phase2Func is KubeVirt's launcher-side pod network setup (kubevirtPhase2)
// or a unit test's stand-in for it.
type phase2Func func(vmi *v1.VirtualMachineInstance, attachments map[string]string, domain *api.Domain) error

// setUpPodNetwork runs phase2 (KubeVirt's phase 2) for vmi before our launcher
// starts its domain, as KubeVirt's launcher does before it defines the
// domain, and returns the domain's interfaces as phase 2 completed them
// (what the monitor reports; our launcher's converter gives the guest's
// NIC the same MAC, MTU and tap by the same rule). attachments is
// SyncVirtualMachine's interface domain attachments (virt-handler's
// DomainAttachmentByInterfaceName: tap for masquerade and bridge).
//
// Only where virt-handler set the pod network up (mode, our launcher's
// --pod-network, is kubevirt-tap: tap0 is in the pod); elsewhere (no virt-handler, the
// conformance suite) the NIC is QEMU's user-mode network, which has its
// own DHCP server, and there is nothing for phase 2 to find. An error is
// KubeVirt's launcher's: "preparing the pod network failed: ...", which
// fails the Sync.
func setUpPodNetwork(phase2 phase2Func, mode string, vmi *v1.VirtualMachineInstance, attachments map[string]string) ([]api.Interface, error) {
	if mode != launcherapi.PodNetworkKubeVirtTap {
		return nil, nil
	}
	d := newDomain(vmi, graceSeconds(vmi))
	d.Spec.Devices.Interfaces = podInterfaces(vmi)
	if err := phase2(vmi, attachments, d); err != nil {
		return nil, fmt.Errorf("preparing the pod network failed: %v", err)
	}
	return d.Spec.Devices.Interfaces, nil
}

// podInterfaces are the domain's interfaces for vmi's pod network with
// the masquerade or bridge binding, as KubeVirt's converter renders them
// before phase 2 (type ethernet, the alias ua-NAME that phase 2 finds
// them by); phase 2 fills in MAC, MTU and the tap.
func podInterfaces(vmi *v1.VirtualMachineInstance) []api.Interface {
	podNets := map[string]bool{}
	for _, n := range vmi.Spec.Networks {
		podNets[n.Name] = n.Pod != nil
	}
	var out []api.Interface
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if !podNets[iface.Name] || (iface.Masquerade == nil && iface.Bridge == nil) || iface.State == v1.InterfaceStateAbsent {
			continue
		}
		out = append(out, api.Interface{Type: "ethernet", Alias: api.NewUserDefinedAlias(iface.Name)})
	}
	return out
}
