package converter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// testImages lays out an image folder with one image holding a kernel, an
// initrd and a container disk.
func testImages(t *testing.T) (*ImageStore, string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "guest")
	for _, f := range []string{"boot/vmlinuz", "boot/initrd.img", "disk/disk.img"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755)
		os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, ImageIndexFile), []byte(`{"example.com/guest:1": "guest"}`), 0o644)
	s, err := OpenImageStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, root
}

func baseVMI() *v1.VirtualMachineInstance {
	mem := resource.MustParse("256Mi")
	return &v1.VirtualMachineInstance{
		ObjectMeta: metaNS("vm1", "ns1", "6d3c1c5e-0b6a-4a43-9f43-0c3a3c6a9e01"),
		Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{
			Memory: &v1.Memory{Guest: &mem},
			// No display: most cases run without a per-VMI folder.
			Devices: v1.Devices{AutoattachGraphicsDevice: off()},
			Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{KernelArgs: "console=ttyS0",
				Container: &v1.KernelBootContainer{Image: "example.com/guest:1", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}}},
		}},
	}
}

// roundTrip renders a domain to XML and parses it back, so that tests
// compare what libvirt would read.
func roundTrip(t *testing.T, d *libvirtxml.Domain) *libvirtxml.Domain {
	t.Helper()
	xml, err := d.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	var out libvirtxml.Domain
	if err := out.Unmarshal(xml); err != nil {
		t.Fatalf("Unmarshal: %v\n%s", err, xml)
	}
	return &out
}

// kubeVirtSMBIOS are virt-handler's default SMBIOS system entries.
var kubeVirtSMBIOS = []libvirtxml.DomainSysInfoEntry{{Name: "manufacturer", Value: "KubeVirt"}, {Name: "family", Value: "KubeVirt"},
	{Name: "product", Value: "None"}, {Name: "sku"}, {Name: "version"}}

func TestBuildDomain(t *testing.T) {
	images, root := testImages(t)
	hostDisk := filepath.Join(t.TempDir(), "host.img")
	os.WriteFile(hostDisk, []byte("QFI\xfbrest"), 0o644)
	port := uint(0)
	want := func(edit func(d *libvirtxml.Domain)) *libvirtxml.Domain {
		d := &libvirtxml.Domain{
			Type: "qemu", Name: "ns1_vm1", UUID: "6d3c1c5e-0b6a-4a43-9f43-0c3a3c6a9e01",
			Memory:     &libvirtxml.DomainMemory{Value: 262144, Unit: "KiB"},
			VCPU:       &libvirtxml.DomainVCPU{Placement: "static", Value: 1},
			CPU:        &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Cores: 1, Threads: 1}},
			OnPoweroff: "destroy", OnCrash: "destroy",
			OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: "pc"},
				Kernel: filepath.Join(root, "boot/vmlinuz"), Initrd: filepath.Join(root, "boot/initrd.img"), Cmdline: "console=ttyS0"},
			Features: &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, VMPort: &libvirtxml.DomainFeatureState{State: "off"}},
			Devices: &libvirtxml.DomainDeviceList{
				Controllers: []libvirtxml.DomainController{{Type: "usb", Index: ptr(uint(0)), Model: "none"},
					{Type: "scsi", Index: ptr(uint(0)), Model: "virtio-non-transitional"},
					{Type: "virtio-serial", Index: ptr(uint(0)), Model: "virtio-non-transitional"}},
				Channels: []libvirtxml.DomainChannel{{Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
					Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}}}},
				MemBalloon: &libvirtxml.DomainMemBalloon{Model: "virtio-non-transitional", FreePageReporting: "on", Stats: &libvirtxml.DomainMemBalloonStats{Period: 10}},
				Serials: []libvirtxml.DomainSerial{{Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: "/log/console.log"}},
					Target: &libvirtxml.DomainSerialTarget{Port: &port}}},
				Consoles: []libvirtxml.DomainConsole{{Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port}}},
				Panics:   []libvirtxml.DomainPanic{{Model: "isa", Address: &libvirtxml.DomainAddress{ISA: &libvirtxml.DomainAddressISA{IOBase: ptr(uint(0x505))}}}},
			},
		}
		if edit != nil {
			edit(d)
		}
		// KubeVirt puts the firmware UUID into SMBIOS too.
		d.SysInfo = []libvirtxml.DomainSysInfo{{SMBIOS: &libvirtxml.DomainSysInfoSMBIOS{System: &libvirtxml.DomainSysInfoSystem{
			Entry: append([]libvirtxml.DomainSysInfoEntry{{Name: "uuid", Value: d.UUID}}, kubeVirtSMBIOS...)}}}}
		d.OS.SMBios = &libvirtxml.DomainSMBios{Mode: "sysinfo"}
		return d
	}
	tests := []struct {
		name  string
		accel Accel
		edit  func(vmi *v1.VirtualMachineInstance)
		want  *libvirtxml.Domain
	}{
		{"kernel boot under TCG", AccelTCG, nil, want(nil)},
		{"KVM with a CPU topology", AccelKVM, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 2, Cores: 2, Threads: 1}
		}, want(func(d *libvirtxml.Domain) {
			d.Type = "kvm"
			d.VCPU.Value = 4
			d.CPU = &libvirtxml.DomainCPU{Mode: "host-model", Topology: &libvirtxml.DomainCPUTopology{Sockets: 2, Cores: 2, Threads: 1}}
		})},
		{"memory from resources.requests, q35, ACPI off", AccelTCG, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Memory = nil
			vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("1Gi")}
			vmi.Spec.Domain.Machine = &v1.Machine{Type: "q35"}
			off := false
			vmi.Spec.Domain.Features = &v1.Features{ACPI: v1.FeatureState{Enabled: &off}}
		}, want(func(d *libvirtxml.Domain) {
			d.Memory.Value = 1 << 20
			d.OS.Type.Machine = "q35"
			d.Features.ACPI = nil
		})},
		{"host disk holding a qcow2 header is raw (as KubeVirt) on sata, read-only, with serial", AccelTCG, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d1", Serial: "S1", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA, ReadOnly: true}}}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "d1", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: hostDisk, Type: v1.HostDiskExists}}}}
		}, want(func(d *libvirtxml.Domain) {
			d.Devices.Disks = []libvirtxml.DomainDisk{{Device: "disk", Alias: &libvirtxml.DomainAlias{Name: "ua-d1"},
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"}, Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: hostDisk}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"}, Serial: "S1", ReadOnly: &libvirtxml.DomainDiskReadOnly{}}}
			d.Devices.Disks[0].Driver.Discard = "unmap"
		})},
		{"container disk without scratch is read-only; firmware uuid wins", AccelTCG, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware.UUID = "11111111-2222-3333-4444-555555555555"
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}}}
		}, want(func(d *libvirtxml.Domain) {
			d.UUID = "11111111-2222-3333-4444-555555555555"
			d.Devices.Disks = []libvirtxml.DomainDisk{{Device: "disk", Alias: &libvirtxml.DomainAlias{Name: "ua-root"},
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"}, Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: filepath.Join(root, "disk/disk.img")}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"}, ReadOnly: &libvirtxml.DomainDiskReadOnly{}}}
			d.Devices.Disks[0].Driver.Discard = "unmap"
			d.Devices.Disks[0].Model = "virtio-non-transitional"
		})},
		{"no serial console", AccelTCG, func(vmi *v1.VirtualMachineInstance) {
			off := false
			vmi.Spec.Domain.Devices.AutoattachSerialConsole = &off
		}, want(func(d *libvirtxml.Domain) { d.Devices.Serials, d.Devices.Consoles = nil, nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.edit != nil {
				tt.edit(vmi)
			}
			got, err := BuildDomain(vmi, DomainOptions{Accel: tt.accel, Images: images, ConsoleLog: "/log/console.log"})
			if err != nil {
				t.Fatalf("BuildDomain: %v", err)
			}
			if diff := cmp.Diff(roundTrip(t, tt.want), roundTrip(t, got)); diff != "" {
				t.Fatalf("domain mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildDomainContainerDiskOverlay(t *testing.T) {
	images, root := testImages(t)
	os.WriteFile(filepath.Join(root, "disk/disk.img"), make([]byte, 1<<20), 0o644)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}}}
	scratch := t.TempDir()
	got, err := BuildDomain(vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: scratch})
	if err != nil {
		t.Fatalf("BuildDomain: %v", err)
	}
	d := got.Devices.Disks[0]
	if d.ReadOnly != nil || d.Driver.Type != "qcow2" || filepath.Dir(d.Source.File.File) != scratch {
		t.Fatalf("want a writable qcow2 overlay in the scratch folder, got %+v %+v", d.Driver, d.Source.File)
	}
}

func TestBuildDomainErrors(t *testing.T) {
	images, _ := testImages(t)
	tests := []struct {
		name      string
		edit      func(vmi *v1.VirtualMachineInstance)
		wantField string
		wantMsg   string
	}{
		{"nothing to boot", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Firmware = nil }, "spec.domain.firmware.kernelBoot", "nothing to boot"},
		{"no memory", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Memory = nil }, "spec.domain.memory.guest", "256Mi"},
		{"tiny memory", func(vmi *v1.VirtualMachineInstance) {
			q := resource.MustParse("1Mi")
			vmi.Spec.Domain.Memory.Guest = &q
		}, "spec.domain.memory.guest", "out of range"},
		{"maxGuest below guest", func(vmi *v1.VirtualMachineInstance) {
			q := resource.MustParse("128Mi")
			vmi.Spec.Domain.Memory.MaxGuest = &q
		}, "spec.domain.memory.maxGuest", "at least the guest's memory"},
		{"unknown image", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware.KernelBoot.Container.Image = "nope:1"
		}, "spec.domain.firmware.kernelBoot.container", `knows example.com/guest:1`},
		{"kernel path not in image", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = "/boot/missing"
		}, "spec.domain.firmware.kernelBoot.container", "no file /boot/missing"},
		{"unsupported bus", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "r", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "usb"}}}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "r", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}}}
		}, "spec.domain.devices.disks[0].disk.bus", "allowed: virtio, sata"},
		{"disk without volume", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "r"}}
		}, "spec.domain.devices.disks[0].name", `no volume named "r"`},
		{"missing host disk", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "r"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "r", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/nonexistent/x.img", Type: v1.HostDiskExists}}}}
		}, "spec.volumes[0].hostDisk.path", "existing file"},
		{"machine type", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Machine = &v1.Machine{Type: "virt"} }, "spec.domain.machine.type", "allowed: pc, q35"},
		{"architecture", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Architecture = "arm64" }, "spec.architecture", "allowed: amd64"},
		{"cpu model", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.CPU = &v1.CPU{Model: "Haswell"} }, "spec.domain.cpu.model", "allowed: host-model"},
		{"max sockets", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 2, MaxSockets: 1} }, "spec.domain.cpu.maxSockets", "below"},
		{"interface without network", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default"}}
		}, "spec.domain.devices.interfaces[0].name", `no network named "default"`},
		{"multus network", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "n"}}
			vmi.Spec.Networks = []v1.Network{{Name: "n", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "x"}}}}
		}, "spec.networks[name=n]", "only the pod network"},
		{"sriov binding", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
			vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		}, "spec.domain.devices.interfaces[0].sriov", "bridge and masquerade"},
		{"network without interface", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		}, "spec.networks[name=default]", "no interface"},
		{"graphics", func(vmi *v1.VirtualMachineInstance) {
			on := true
			vmi.Spec.Domain.Devices.AutoattachGraphicsDevice = &on
		}, "spec.domain.devices.autoattachGraphicsDevice", "per-VMI folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.edit(vmi)
			_, err := BuildDomain(vmi, DomainOptions{Accel: AccelTCG, Images: images})
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SpecError", err)
			}
			if se.Field != tt.wantField || !strings.Contains(se.Msg, tt.wantMsg) {
				t.Fatalf("err = field %q msg %q; want field %q and a message containing %q", se.Field, se.Msg, tt.wantField, tt.wantMsg)
			}
		})
	}
}

func TestCheckSupported(t *testing.T) {
	ok := map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "a", "annotations": map[string]any{"x": "y"}},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{"disks": []any{map[string]any{"name": "d", "disk": map[string]any{"bus": "virtio"}}}, "interfaces": []any{}}}},
	}
	if err := CheckSupported(ok); err != nil {
		t.Fatalf("CheckSupported(ok) = %v", err)
	}
	bad := map[string]any{"spec": map[string]any{
		"networks": []any{map[string]any{"name": "default", "pod": map[string]any{}}},
		"domain":   map[string]any{"devices": map[string]any{"interfaces": []any{map[string]any{"name": "default", "masquerade": map[string]any{}, "pciAddress": "0000:81:00.1"}}}},
	}}
	err := CheckSupported(bad)
	if err == nil || !strings.Contains(err.Error(), "spec.domain.devices.interfaces[0].pciAddress") || !strings.Contains(err.Error(), SupportedFieldsHelp) {
		t.Fatalf("CheckSupported(bad) = %v, want the first unsupported field and the supported list", err)
	}
}

// TestBuildDomainKubeVirtDefaults feeds the launcher what KubeVirt's
// mutating webhook adds to every VMI (seen on cluster-lite): the host
// architecture, host-model CPU with a socket limit, and the pod network
// with the bridge binding, which becomes a virtio NIC on QEMU's user-mode
// network.
func TestBuildDomainKubeVirtDefaults(t *testing.T) {
	images, _ := testImages(t)
	vmi := baseVMI()
	vmi.Spec.Architecture = "amd64"
	vmi.Spec.Domain.CPU = &v1.CPU{Cores: 1, Sockets: 1, Threads: 1, MaxSockets: 4, Model: v1.CPUModeHostModel}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{*v1.DefaultBridgeNetworkInterface()}
	vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
	dom, err := BuildDomain(vmi, DomainOptions{Accel: AccelTCG, Images: images})
	if err != nil {
		t.Fatal(err)
	}
	if len(dom.Devices.Interfaces) != 1 || dom.Devices.Interfaces[0].Source.User == nil || dom.Devices.Interfaces[0].Model.Type != "virtio-non-transitional" {
		t.Fatalf("interfaces = %+v, want one virtio NIC on the user-mode network", dom.Devices.Interfaces)
	}
	if dom.CPU.Mode != "" {
		t.Fatalf("TCG CPU mode = %q, want QEMU's default model", dom.CPU.Mode)
	}
	dom, err = BuildDomain(vmi, DomainOptions{Accel: AccelKVM, Images: images})
	if err != nil || dom.CPU.Mode != "host-model" {
		t.Fatalf("KVM: mode %q, err %v; want host-model", dom.CPU.Mode, err)
	}
}

// TestConvertMaxGuest takes the memory-hotplug room KubeVirt's defaults add
// at 1Gi (virt-handler hands it over in KubeVirt mode): the domain keeps the
// guest's memory, renders no maxMemory, and a note says there is no room.
func TestConvertMaxGuest(t *testing.T) {
	images, _ := testImages(t)
	vmi := baseVMI()
	guest, maxGuest := resource.MustParse("1Gi"), resource.MustParse("4Gi")
	vmi.Spec.Domain.Memory = &v1.Memory{Guest: &guest, MaxGuest: &maxGuest}
	raw := map[string]any{"spec": map[string]any{"domain": map[string]any{"memory": map[string]any{"guest": "1Gi", "maxGuest": "4Gi"}}}}
	if err := CheckSupported(raw); err != nil {
		t.Fatalf("CheckSupported(maxGuest) = %v", err)
	}
	c, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images})
	if err != nil {
		t.Fatal(err)
	}
	dom := roundTrip(t, c.Domain)
	if dom.Memory.Value != 1<<20 || dom.MaximumMemory != nil {
		t.Fatalf("memory %+v, maxMemory %+v; want 1Gi and no maxMemory", dom.Memory, dom.MaximumMemory)
	}
	if len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "spec.domain.memory.maxGuest 4Gi") {
		t.Fatalf("notes = %q, want one on maxGuest", c.Notes)
	}
	vmi.Spec.Domain.Memory.MaxGuest = &guest
	if c, err = Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images}); err != nil || len(c.Notes) != 0 {
		t.Fatalf("maxGuest = guest: notes %q, err %v; want none", c.Notes, err)
	}
}
