package monitor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// podNetVMI has a masquerade interface on the pod network, an absent one,
// and one on a Multus network.
func podNetVMI() *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Namespace, vmi.Name, vmi.UID = "ns", "vm1", "0b8a"
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{
		{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}},
		{Name: "gone", State: v1.InterfaceStateAbsent, InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}},
		{Name: "other", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}},
	}
	vmi.Spec.Networks = []v1.Network{
		{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}},
		{Name: "gone", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}},
		{Name: "other", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "n"}}},
	}
	return vmi
}

func TestPodNetworkPhase2GetsTheConvertersInterfacesAndItsResultIsReported(t *testing.T) {
	attachments := map[string]string{"default": string(v1.Tap)}
	var got []api.Interface
	phase2 := func(vmi *v1.VirtualMachineInstance, a map[string]string, d *api.Domain) error {
		if !reflect.DeepEqual(a, attachments) {
			t.Errorf("attachments %v, want %v", a, attachments)
		}
		if d.ObjectMeta.UID != vmi.UID || d.Spec.Name != "ns_vm1" {
			t.Errorf("domain %s (UID %s) for VMI %s", d.Spec.Name, d.ObjectMeta.UID, vmi.UID)
		}
		got = append([]api.Interface(nil), d.Spec.Devices.Interfaces...)
		// What KubeVirt's TapLibvirtSpecGenerator does to it.
		d.Spec.Devices.Interfaces[0].MAC = &api.MAC{MAC: "02:00:00:00:00:01"}
		d.Spec.Devices.Interfaces[0].Target = &api.InterfaceTarget{Device: "tap0", Managed: "no"}
		return nil
	}
	ifaces, err := setUpPodNetwork(phase2, launcherapi.PodNetworkKubeVirtTap, podNetVMI(), attachments)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.Interface{{Type: "ethernet", Alias: api.NewUserDefinedAlias("default")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("phase 2 was given %+v, want only the pod network's masquerade interface %+v", got, want)
	}
	if len(ifaces) != 1 || ifaces[0].MAC.MAC != "02:00:00:00:00:01" || ifaces[0].Target.Device != "tap0" || ifaces[0].Alias.GetName() != "default" {
		t.Fatalf("reported interfaces %+v, want phase 2's", ifaces)
	}
}

func TestPodNetworkPhase2ErrorIsKubeVirtsLaunchersMessage(t *testing.T) {
	phase2 := func(*v1.VirtualMachineInstance, map[string]string, *api.Domain) error {
		return errors.New("Link not found")
	}
	_, err := setUpPodNetwork(phase2, launcherapi.PodNetworkKubeVirtTap, podNetVMI(), nil)
	if err == nil || err.Error() != "preparing the pod network failed: Link not found" {
		t.Fatalf("error %v, want KubeVirt's launcher's words", err)
	}
}

func TestPodNetworkPhase2IsNotRunWhereNothingSetThePodNetworkUp(t *testing.T) {
	phase2 := func(*v1.VirtualMachineInstance, map[string]string, *api.Domain) error {
		t.Fatal("phase 2 ran on QEMU's user-mode network")
		return nil
	}
	for _, mode := range []string{launcherapi.PodNetworkUser, ""} {
		if ifaces, err := setUpPodNetwork(phase2, mode, podNetVMI(), nil); err != nil || ifaces != nil {
			t.Fatalf("--pod-network %q: %v, %v", mode, ifaces, err)
		}
	}
}

func TestSyncFailsWithPhase2sErrorAndStartsNoLauncher(t *testing.T) {
	dir := t.TempDir()
	f := Flags{Name: "vm1", Namespace: "ns", ShareDir: t.TempDir(), Launcher: filepath.Join(dir, "no-launcher")}
	m := New(f, dir, slog.New(slog.DiscardHandler), io.Discard)
	m.podNetwork = func() string { return launcherapi.PodNetworkKubeVirtTap }
	m.phase2 = func(*v1.VirtualMachineInstance, map[string]string, *api.Domain) error {
		return errors.New("failed to start DHCP server for interface eth0")
	}
	err := m.Sync(context.Background(), podNetVMI(), map[string]string{"default": string(v1.Tap)})
	if err == nil || err.Error() != "preparing the pod network failed: failed to start DHCP server for interface eth0" {
		t.Fatalf("Sync: %v, want KubeVirt's launcher's words", err)
	}
	if m.starts != 0 || m.cur != nil || m.Domain() != nil {
		t.Fatalf("a launcher start (%d) or a domain after phase 2 failed", m.starts)
	}
}
