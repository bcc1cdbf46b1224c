package kvdefaults

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

func q(s string) *resource.Quantity { r := resource.MustParse(s); return &r }

var (
	yes  = func() *bool { b := true; return &b }
	no   = func() *bool { b := false; return &b }
	none = func() *v1.EvictionStrategy { e := v1.EvictionStrategyNone; return &e }
)

// quantities compare by value: "1Gi" and "1024Mi" are the same memory.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestFirmwareUUID(t *testing.T) {
	// The value KubeVirt's CalculateLegacyUUID gives for "testvm"
	// (SHA-1 UUID in namespace 6a1a24a1-4061-4607-8bf4-a3963d0c5895),
	// computed independently with Python's uuid.uuid5.
	if got, want := FirmwareUUID("testvm"), "5a9fc181-957e-5c32-9e5a-2de5e9673531"; string(got) != want {
		t.Fatalf("FirmwareUUID(testvm) = %q, want %q", got, want)
	}
}

func TestApply(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "testvm", Namespace: "ns"}
	uuid := FirmwareUUID("testvm")
	// base is what every VMI below gets besides its own changes.
	base := func(spec v1.VirtualMachineInstanceSpec) v1.VirtualMachineInstanceSpec {
		spec.Architecture = "amd64"
		spec.EvictionStrategy = none()
		if spec.Domain.Machine == nil {
			spec.Domain.Machine = &v1.Machine{Type: "q35"}
		}
		if spec.Domain.Firmware == nil {
			spec.Domain.Firmware = &v1.Firmware{UUID: uuid}
		}
		if spec.Domain.Features == nil {
			spec.Domain.Features = &v1.Features{}
		}
		spec.Domain.Features.ACPI = v1.FeatureState{Enabled: yes()}
		return spec
	}
	podNet := func(spec *v1.VirtualMachineInstanceSpec) {
		spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}
		spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	}
	tests := []struct {
		name string
		in   v1.VirtualMachineInstanceSpec
		want func() v1.VirtualMachineInstanceSpec
	}{{
		name: "a container disk and cloud-init, no disks listed",
		in: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Resources: v1.ResourceRequirements{Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: *q("128Mi")}}},
			Volumes: []v1.Volume{
				{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41"}}},
				{Name: "cloudinit", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
			},
		},
		want: func() v1.VirtualMachineInstanceSpec {
			s := base(v1.VirtualMachineInstanceSpec{})
			s.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: *q("128Mi")}
			// 128Mi is below 1Gi: no memory hotplug room.
			s.Domain.Memory = &v1.Memory{Guest: q("128Mi")}
			s.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 1, Threads: 1, MaxSockets: 4, Model: "host-model"}
			podNet(&s)
			s.Domain.Devices.Disks = []v1.Disk{
				{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "sata"}}},
				{Name: "cloudinit", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "sata"}}},
			}
			s.Volumes = []v1.Volume{
				{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41", ImagePullPolicy: k8sv1.PullIfNotPresent}}},
				{Name: "cloudinit", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
			}
			return s
		},
	}, {
		name: "limits only, an untagged image, a CD-ROM, a watchdog, no pod interface",
		in: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Resources: v1.ResourceRequirements{Limits: k8sv1.ResourceList{k8sv1.ResourceMemory: *q("2Gi"), k8sv1.ResourceCPU: *q("1500m")}},
				Devices: v1.Devices{
					AutoattachPodInterface: no(),
					Disks:                  []v1.Disk{{Name: "iso", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{}}}, {Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}}},
					Watchdog:               &v1.Watchdog{Name: "w"},
				},
			},
			Volumes: []v1.Volume{
				{Name: "iso", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example/iso"}}},
				{Name: "root", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}},
			},
		},
		want: func() v1.VirtualMachineInstanceSpec {
			s := base(v1.VirtualMachineInstanceSpec{})
			s.Domain.Resources = v1.ResourceRequirements{
				Limits:   k8sv1.ResourceList{k8sv1.ResourceMemory: *q("2Gi"), k8sv1.ResourceCPU: *q("1500m")},
				Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: *q("2Gi"), k8sv1.ResourceCPU: *q("1500m")},
			}
			s.Domain.Memory = &v1.Memory{Guest: q("2Gi"), MaxGuest: q("8Gi")}
			// 1500m rounds up to 2 sockets.
			s.Domain.CPU = &v1.CPU{Sockets: 2, Cores: 1, Threads: 1, MaxSockets: 8, Model: "host-model"}
			s.Domain.Devices.AutoattachPodInterface = no()
			s.Domain.Devices.Disks = []v1.Disk{
				{Name: "iso", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: "sata", ReadOnly: yes(), Tray: v1.TrayStateClosed}}},
				{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}},
			}
			s.Domain.Devices.Watchdog = &v1.Watchdog{Name: "w", WatchdogDevice: v1.WatchdogDevice{I6300ESB: &v1.I6300ESBWatchdog{Action: v1.WatchdogActionReset}}}
			s.Volumes = []v1.Volume{
				{Name: "iso", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example/iso", ImagePullPolicy: k8sv1.PullAlways}}},
				{Name: "root", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}},
			}
			return s
		},
	}, {
		name: "written by hand: machine, firmware, topology, network, hyperv with dependencies, timers",
		in: v1.VirtualMachineInstanceSpec{
			Architecture: "amd64",
			Domain: v1.DomainSpec{
				Machine:  &v1.Machine{Type: "pc-q35-7.2"},
				Firmware: &v1.Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223", Serial: "s1"},
				CPU:      &v1.CPU{Cores: 4, Sockets: 100, Threads: 1, Model: "Haswell"},
				Memory:   &v1.Memory{Guest: q("1Gi")},
				Clock:    &v1.Clock{Timer: &v1.Timer{HPET: &v1.HPETTimer{}, RTC: &v1.RTCTimer{TickPolicy: "catchup"}}},
				Features: &v1.Features{
					ACPI: v1.FeatureState{Enabled: no()},
					APIC: &v1.FeatureAPIC{},
					SMM:  &v1.FeatureState{},
					Hyperv: &v1.FeatureHyperv{
						SyNICTimer: &v1.SyNICTimer{},
						EVMCS:      &v1.FeatureState{},
						TLBFlush:   &v1.FeatureState{Enabled: no()},
					},
				},
				Devices: v1.Devices{Interfaces: []v1.Interface{{Name: "nic", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}},
			},
			Networks: []v1.Network{{Name: "nic", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}},
		},
		want: func() v1.VirtualMachineInstanceSpec {
			s := base(v1.VirtualMachineInstanceSpec{
				Domain: v1.DomainSpec{
					Machine:  &v1.Machine{Type: "pc-q35-7.2"},
					Firmware: &v1.Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223", Serial: "s1"},
				},
			})
			s.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: *q("1Gi")}
			s.Domain.Memory = &v1.Memory{Guest: q("1Gi"), MaxGuest: q("4Gi")}
			// 100 sockets x 4 would be 1600 vCPUs: bounded at 512/4 = 128.
			s.Domain.CPU = &v1.CPU{Cores: 4, Sockets: 100, Threads: 1, MaxSockets: 128, Model: "Haswell",
				Features: []v1.CPUFeature{{Name: "vmx", Policy: "require"}}}
			s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{HPET: &v1.HPETTimer{Enabled: yes()}, RTC: &v1.RTCTimer{TickPolicy: "catchup", Enabled: yes()}}}
			s.Domain.Features.ACPI = v1.FeatureState{Enabled: no()}
			s.Domain.Features.APIC = &v1.FeatureAPIC{Enabled: yes()}
			s.Domain.Features.SMM = &v1.FeatureState{Enabled: yes()}
			s.Domain.Features.Hyperv = &v1.FeatureHyperv{
				SyNICTimer: &v1.SyNICTimer{Enabled: yes()},
				SyNIC:      &v1.FeatureState{Enabled: yes()}, // for synictimer
				VPIndex:    &v1.FeatureState{Enabled: yes()}, // for synic
				EVMCS:      &v1.FeatureState{Enabled: yes()},
				VAPIC:      &v1.FeatureState{Enabled: yes()}, // for evmcs
				TLBFlush:   &v1.FeatureState{Enabled: no()},  // disabled: nothing needed
			}
			s.Domain.Devices.Interfaces = []v1.Interface{{Name: "nic", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
			s.Networks = []v1.Network{{Name: "nic", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
			return s
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{ObjectMeta: meta, Spec: tt.in}
			Apply(vmi)
			if diff := cmp.Diff(tt.want(), vmi.Spec, quantities); diff != "" {
				t.Fatalf("spec after Apply (-want +got):\n%s", diff)
			}
			// Defaulting twice changes nothing more.
			again := vmi.DeepCopy()
			Apply(again)
			if diff := cmp.Diff(vmi.Spec, again.Spec, quantities); diff != "" {
				t.Fatalf("second Apply changed (-first +second):\n%s", diff)
			}
		})
	}
}
