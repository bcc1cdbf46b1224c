package converter

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// fakeOVMF lays out firmware files, so that the test needs no ovmf package.
func fakeOVMF(t *testing.T) OVMF {
	dir := t.TempDir()
	o := OVMF{Code: dir + "/code.fd", Vars: dir + "/vars.fd", SecureCode: dir + "/code.secboot.fd", SecureVars: dir + "/vars.ms.fd"}
	for _, f := range []string{o.Code, o.Vars, o.SecureCode, o.SecureVars} {
		os.WriteFile(f, []byte(filepath.Base(f)), 0o644)
	}
	return o
}

// noXMLName ignores the element names encoding/xml fills in on parsing.
var noXMLName = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".XMLName" }, cmp.Ignore())

func on() *bool  { b := true; return &b }
func off() *bool { b := false; return &b }

// TestConvertRealVMIs takes the fields real KubeVirt manifests use through
// Convert and compares the parts of the domain they set, parsed back from
// XML as libvirt would read it.
func TestConvertRealVMIs(t *testing.T) {
	images, _ := testImages(t)
	ovmf := fakeOVMF(t)
	claims := t.TempDir()
	for _, c := range []string{"pvc1", "dv1", "golden"} {
		os.MkdirAll(filepath.Join(claims, c), 0o755)
		os.WriteFile(filepath.Join(claims, c, "disk.img"), []byte("raw"), 0o644)
	}
	haveQemuImg := exec.Command("qemu-img", "--version").Run() == nil
	_, xorrisoErr := exec.LookPath("xorrisofs")
	ports := func(proto string, guest int) (int, error) { return 20000 + guest, nil }

	tests := []struct {
		name  string
		accel Accel
		edit  func(vmi *v1.VirtualMachineInstance)
		// check compares what the case sets; scratch is the per-VMI folder.
		check func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string)
		skip  bool
	}{
		{name: "EFI with Secure Boot and SMM on q35", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Machine = &v1.Machine{Type: "q35"}
			vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}}
			vmi.Spec.Domain.Firmware.Serial = "SER-1"
			vmi.Spec.Domain.Features = &v1.Features{ACPI: v1.FeatureState{Enabled: on()}, SMM: &v1.FeatureState{Enabled: on()}, APIC: &v1.FeatureAPIC{Enabled: on()}}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			nvram := filepath.Join(scratch, "vm1_VARS.fd")
			want := &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: "q35"},
				Loader: &libvirtxml.DomainLoader{Path: ovmf.SecureCode, Readonly: "yes", Secure: "yes", Type: "pflash"},
				NVRam:  &libvirtxml.DomainNVRam{NVRam: nvram, Template: ovmf.SecureVars},
				Kernel: d.OS.Kernel, Initrd: d.OS.Initrd, Cmdline: d.OS.Cmdline, SMBios: &libvirtxml.DomainSMBios{Mode: "sysinfo"}}
			if diff := cmp.Diff(want, d.OS); diff != "" {
				t.Errorf("OS (-want +got):\n%s", diff)
			}
			if data, err := os.ReadFile(nvram); err != nil || string(data) != "vars.ms.fd" {
				t.Errorf("per-VMI NVRAM copy: %q, %v", data, err)
			}
			wantF := &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}, SMM: &libvirtxml.DomainFeatureSMM{}, VMPort: &libvirtxml.DomainFeatureState{State: "off"}}
			if diff := cmp.Diff(wantF, d.Features); diff != "" {
				t.Errorf("features (-want +got):\n%s", diff)
			}
			wantSys := []libvirtxml.DomainSysInfo{{SMBIOS: &libvirtxml.DomainSysInfoSMBIOS{System: &libvirtxml.DomainSysInfoSystem{Entry: []libvirtxml.DomainSysInfoEntry{
				{Name: "uuid", Value: d.UUID}, {Name: "serial", Value: "SER-1"}, {Name: "manufacturer", Value: "KubeVirt"}, {Name: "family", Value: "KubeVirt"},
				{Name: "product", Value: "None"}, {Name: "sku"}, {Name: "version"}}}}}}
			if diff := cmp.Diff(wantSys, d.SysInfo); diff != "" {
				t.Errorf("sysinfo (-want +got):\n%s", diff)
			}
		}},
		{name: "EFI without Secure Boot on the pc machine", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: off()}}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			want := &libvirtxml.DomainLoader{Path: ovmf.Code, Readonly: "yes", Secure: "no", Type: "pflash"}
			if diff := cmp.Diff(want, d.OS.Loader); diff != "" {
				t.Errorf("loader (-want +got):\n%s", diff)
			}
			if d.OS.NVRam.Template != ovmf.Vars {
				t.Errorf("nvram template %q", d.OS.NVRam.Template)
			}
		}},
		{name: "BIOS on the serial console", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{BIOS: &v1.BIOS{UseSerial: on()}}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			if diff := cmp.Diff(&libvirtxml.DomainBIOS{UseSerial: "yes"}, d.OS.BIOS); diff != "" || d.OS.Loader != nil {
				t.Errorf("bios (-want +got):\n%s loader %+v", diff, d.OS.Loader)
			}
		}},
		{name: "Hyper-V and its clock under KVM", accel: AccelKVM, edit: func(vmi *v1.VirtualMachineInstance) {
			r := uint32(8191)
			vmi.Spec.Domain.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{
				Relaxed: &v1.FeatureState{Enabled: on()}, VAPIC: &v1.FeatureState{}, Spinlocks: &v1.FeatureSpinlocks{Retries: &r},
				VPIndex: &v1.FeatureState{}, SyNIC: &v1.FeatureState{}, SyNICTimer: &v1.SyNICTimer{Direct: &v1.FeatureState{}},
				VendorID: &v1.FeatureVendorID{VendorID: "KVMKVMKVM"}, TLBFlush: &v1.FeatureState{Enabled: off()}, Frequencies: &v1.FeatureState{},
			}}
			vmi.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{}}, Timer: &v1.Timer{
				HPET: &v1.HPETTimer{Enabled: off()}, PIT: &v1.PITTimer{TickPolicy: v1.PITTickPolicyDelay},
				RTC: &v1.RTCTimer{TickPolicy: v1.RTCTickPolicyCatchup, Track: v1.TrackGuest}, Hyperv: &v1.HypervTimer{}}}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			st := func(s string) *libvirtxml.DomainFeatureState { return &libvirtxml.DomainFeatureState{State: s} }
			want := &libvirtxml.DomainFeatureHyperV{
				Relaxed: st("on"), VAPIC: st("on"), VPIndex: st("on"), Synic: st("on"), Frequencies: st("on"),
				Spinlocks: &libvirtxml.DomainFeatureHyperVSpinlocks{DomainFeatureState: *st("on"), Retries: 8191},
				STimer:    &libvirtxml.DomainFeatureHyperVSTimer{DomainFeatureState: *st("on"), Direct: st("on")},
				VendorId:  &libvirtxml.DomainFeatureHyperVVendorId{DomainFeatureState: *st("on"), Value: "KVMKVMKVM"},
				TLBFlush:  &libvirtxml.DomainFeatureHyperVTLBFlush{DomainFeatureState: *st("off")},
			}
			if diff := cmp.Diff(want, d.Features.HyperV); diff != "" {
				t.Errorf("hyperv (-want +got):\n%s", diff)
			}
			// KubeVirt's order (rtc, pit, kvmclock, hpet, hypervclock);
			// utc without an offset resets the RTC adjustment.
			wantClock := &libvirtxml.DomainClock{Offset: "utc", Adjustment: "reset", Timer: []libvirtxml.DomainTimer{
				{Name: "rtc", TickPolicy: "catchup", Track: "guest", Present: "yes"}, {Name: "pit", TickPolicy: "delay", Present: "yes"},
				{Name: "hpet", Present: "no"}, {Name: "hypervclock", Present: "yes"}}}
			if diff := cmp.Diff(wantClock, d.Clock); diff != "" {
				t.Errorf("clock (-want +got):\n%s", diff)
			}
			if len(c.Notes) != 0 {
				t.Errorf("notes under KVM: %v", c.Notes)
			}
		}},
		{name: "Hyper-V, kvm clock and a time zone under TCG: left out with a note each", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{Relaxed: &v1.FeatureState{}}}
			tz := v1.ClockOffsetTimezone("Europe/Berlin")
			vmi.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}, Timer: &v1.Timer{KVM: &v1.KVMTimer{}, Hyperv: &v1.HypervTimer{}}}
		}, skip: func() bool { _, err := os.Stat("/usr/share/zoneinfo/Europe/Berlin"); return err != nil }(),
			check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
				if d.Features.HyperV != nil {
					t.Errorf("hyperv under TCG: %+v", d.Features.HyperV)
				}
				if diff := cmp.Diff(&libvirtxml.DomainClock{Offset: "timezone", TimeZone: "Europe/Berlin"}, d.Clock); diff != "" {
					t.Errorf("clock (-want +got):\n%s", diff)
				}
				if len(c.Notes) != 3 || !strings.Contains(c.Notes[0], "spec.domain.features.hyperv") || !strings.Contains(c.Notes[1], "timer.kvm") || !strings.Contains(c.Notes[2], "timer.hyperv") {
					t.Errorf("notes = %q", c.Notes)
				}
			}},
		{name: "rng, a display, no serial console", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Rng = &v1.Rng{}
			vmi.Spec.Domain.Devices.AutoattachGraphicsDevice = on()
			vmi.Spec.Domain.Devices.AutoattachSerialConsole = off()
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			wantRNG := []libvirtxml.DomainRNG{{Model: "virtio-non-transitional", Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}}}}
			if diff := cmp.Diff(wantRNG, d.Devices.RNGs, noXMLName); diff != "" {
				t.Errorf("rng (-want +got):\n%s", diff)
			}
			wantG := []libvirtxml.DomainGraphic{{VNC: &libvirtxml.DomainGraphicVNC{Listeners: []libvirtxml.DomainGraphicListener{{Socket: &libvirtxml.DomainGraphicListenerSocket{Socket: filepath.Join(scratch, "virt-vnc")}}}}}}
			if diff := cmp.Diff(wantG, d.Devices.Graphics, noXMLName); diff != "" || len(d.Devices.Videos) != 1 || d.Devices.Videos[0].Model != (libvirtxml.DomainVideoModel{Type: "vga", Heads: 1, VRam: 16384}) {
				t.Errorf("graphics (-want +got):\n%s videos %+v", diff, d.Devices.Videos)
			}
			if d.Devices.Serials != nil {
				t.Errorf("serial console attached")
			}
		}},
		{name: "masquerade with ports: forwarded from loopback", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{
				{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}, MacAddress: "02:00:00:00:00:01",
					Ports: []v1.Port{{Name: "http", Port: 80}, {Port: 53, Protocol: "UDP"}}},
			}
			vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			wantPorts := []launcherapi.PortForward{
				{Interface: "default", Name: "http", Protocol: "TCP", GuestPort: 80, HostAddress: "127.0.0.1", HostPort: 20080},
				{Interface: "default", Protocol: "UDP", GuestPort: 53, HostAddress: "127.0.0.1", HostPort: 20053},
			}
			if diff := cmp.Diff(wantPorts, c.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			wantArgs := []libvirtxml.DomainQEMUCommandlineArg{{Value: "-netdev"}, {Value: "user,id=ua-default,net=10.0.2.0/24,host=10.0.2.1,dhcpstart=10.0.2.2,ipv6-net=fd10:0:2::/120,ipv6-host=fd10:0:2::1,hostfwd=tcp:127.0.0.1:20080-:80,hostfwd=udp:127.0.0.1:20053-:53"},
				{Value: "-device"}, {Value: "virtio-net-pci-non-transitional,netdev=ua-default,id=ua-default,romfile=,bus=pci.0,addr=0x1a,mac=02:00:00:00:00:01"}}
			if d.QEMUCommandline == nil || d.Devices.Interfaces != nil {
				t.Fatalf("want the NIC on QEMU's command line, got interfaces %+v", d.Devices.Interfaces)
			}
			if diff := cmp.Diff(wantArgs, d.QEMUCommandline.Args); diff != "" {
				t.Errorf("qemu args (-want +got):\n%s", diff)
			}
		}},
		{name: "bridge without ports, e1000", accel: AccelTCG, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Model: "e1000", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}
			vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			want := []libvirtxml.DomainInterface{{Source: &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}}, Model: &libvirtxml.DomainInterfaceModel{Type: "e1000"},
				Alias: &libvirtxml.DomainAlias{Name: "ua-default"}, ROM: &libvirtxml.DomainROM{Enabled: "no"}}}
			if diff := cmp.Diff(want, d.Devices.Interfaces, noXMLName); diff != "" || c.Ports != nil {
				t.Errorf("interfaces (-want +got):\n%s ports %v", diff, c.Ports)
			}
		}},
		{name: "claims, an ephemeral claim, an empty disk, cloud-init on a CD-ROM", accel: AccelTCG, skip: !haveQemuImg || xorrisoErr != nil, edit: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{
				{Name: "pvc", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}},
				{Name: "dv", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "sata"}}},
				{Name: "eph", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}},
				{Name: "scratch", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}},
				{Name: "ci", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: "sata"}}},
			}
			vmi.Spec.Volumes = []v1.Volume{
				{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc1"}}}},
				{Name: "dv", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv1"}}},
				{Name: "eph", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{PersistentVolumeClaim: &k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "golden"}}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
				{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#!/bin/sh\necho hi\n"}}},
			}
		}, check: func(t *testing.T, c *Conversion, d *libvirtxml.Domain, scratch string) {
			disk := func(dev, name, file, format, target, bus string, ro bool) libvirtxml.DomainDisk {
				dd := libvirtxml.DomainDisk{Device: dev, Alias: &libvirtxml.DomainAlias{Name: "ua-" + name},
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format}, Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: file}},
					Target: &libvirtxml.DomainDiskTarget{Dev: target, Bus: bus}}
				if ro {
					dd.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
				}
				if dev == "disk" {
					dd.Driver.Discard = "unmap"
				}
				if dev == "disk" && bus == "virtio" {
					dd.Model = "virtio-non-transitional"
				}
				return dd
			}
			want := []libvirtxml.DomainDisk{
				disk("disk", "pvc", filepath.Join(claims, "pvc1/disk.img"), "raw", "vda", "virtio", false),
				disk("disk", "dv", filepath.Join(claims, "dv1/disk.img"), "raw", "sda", "sata", false),
				disk("disk", "eph", filepath.Join(scratch, "overlay-eph.qcow2"), "qcow2", "vdb", "virtio", false),
				disk("disk", "scratch", filepath.Join(scratch, "emptydisk-scratch.qcow2"), "qcow2", "vdc", "virtio", false),
				disk("cdrom", "ci", filepath.Join(scratch, "cloudinit-ci.iso"), "raw", "sdb", "sata", true),
			}
			want[2].BackingStore = &libvirtxml.DomainDiskBackingStore{Format: &libvirtxml.DomainDiskFormat{Type: "raw"},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: filepath.Join(claims, "golden/disk.img")}}}
			if diff := cmp.Diff(want, d.Devices.Disks, noXMLName); diff != "" {
				t.Errorf("disks (-want +got):\n%s", diff)
			}
			out, err := exec.Command("qemu-img", "info", filepath.Join(scratch, "emptydisk-scratch.qcow2")).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "virtual size: 1 GiB") {
				t.Errorf("empty disk: %v %s", err, out)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip {
				t.Skip("a host tool or file this case needs is missing")
			}
			vmi := baseVMI()
			tt.edit(vmi)
			scratch := t.TempDir()
			c, err := Convert(context.Background(), vmi, DomainOptions{Accel: tt.accel, Images: images, ConsoleLog: "/log/console.log",
				ScratchDir: scratch, ClaimDir: claims, OVMF: ovmf, HostPort: ports})
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			tt.check(t, c, roundTrip(t, c.Domain), scratch)
		})
	}
}

func TestConvertRealVMIErrors(t *testing.T) {
	images, _ := testImages(t)
	claims := t.TempDir()
	pvc := func(name string) v1.VolumeSource {
		return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
	}
	for _, tt := range []struct {
		name       string
		claimDir   string
		edit       func(vmi *v1.VirtualMachineInstance)
		field, msg string
	}{
		{"missing claim file names the path", claims, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: pvc("nope")}}
		}, "spec.volumes[0].persistentVolumeClaim.claimName", filepath.Join(claims, "nope", "disk.img")},
		{"no claim folder", "", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}}}
		}, "spec.volumes[0].dataVolume.name", "--claim-dir"},
		{"cloud-init secret", claims, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "ci"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataSecretRef: &k8sv1.LocalObjectReference{Name: "s"}}}}}
		}, "spec.volumes[0].cloudInitNoCloud.secretRef", "no cluster secrets"},
		{"secure boot without SMM", claims, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Machine = &v1.Machine{Type: "q35"}
			vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}}
		}, "spec.domain.firmware.bootloader.efi.secureBoot", "SMM"},
		{"secure boot on pc", claims, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}}
			vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{}}
		}, "spec.domain.firmware.bootloader.efi.secureBoot", "q35"},
		{"lun", claims, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d", DiskDevice: v1.DiskDevice{LUN: &v1.LunTarget{}}}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: pvc("x")}}
		}, "spec.domain.devices.disks[0].lun", "not supported"},
		{"bad port", claims, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Ports: []v1.Port{{Port: 80, Protocol: "SCTP"}}}}
			vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		}, "spec.domain.devices.interfaces[0].ports[0].protocol", "TCP, UDP"},
		{"unknown time zone", claims, func(vmi *v1.VirtualMachineInstance) {
			tz := v1.ClockOffsetTimezone("Mars/Olympus")
			vmi.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}}
		}, "spec.domain.clock.timezone", "Mars/Olympus"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.edit(vmi)
			_, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: t.TempDir(), ClaimDir: tt.claimDir, OVMF: fakeOVMF(t)})
			var se *SpecError
			if !errors.As(err, &se) || se.Field != tt.field || !strings.Contains(se.Msg, tt.msg) {
				t.Fatalf("err = %v, want field %s and %q", err, tt.field, tt.msg)
			}
		})
	}
}
