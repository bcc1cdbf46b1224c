package converter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// TestDiskTargetNamesAsLibvirt: past the 26th disk of a bus, target names
// go on as libvirt names them (vdz, vdaa, vdab, ...), not vd{, vd|.
func TestDiskTargetNamesAsLibvirt(t *testing.T) {
	images, _ := testImages(t)
	img := filepath.Join(t.TempDir(), "d.img")
	if err := os.WriteFile(img, []byte("raw"), 0o644); err != nil {
		t.Fatal(err)
	}
	vmi := baseVMI()
	add := func(name string, bus v1.DiskBus) {
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}})
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: img, Type: v1.HostDiskExists}}})
	}
	for i := range 30 {
		add(fmt.Sprintf("v%d", i), v1.DiskBusVirtio)
	}
	for i := range 28 {
		add(fmt.Sprintf("s%d", i), v1.DiskBusSATA)
	}
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range conv.Domain.Devices.Disks {
		got = append(got, d.Target.Dev)
	}
	want := map[int]string{0: "vda", 25: "vdz", 26: "vdaa", 27: "vdab", 29: "vdad", 30: "sda", 55: "sdz", 56: "sdaa", 57: "sdab"}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("disk %d: target %q, want %q (all: %v)", i, got[i], w, got)
		}
	}
}

// TestDiskTargetName checks the libvirt naming rule past one and two letters.
func TestDiskTargetName(t *testing.T) {
	for n, want := range map[int]string{0: "vda", 1: "vdb", 25: "vdz", 26: "vdaa", 51: "vdaz", 52: "vdba", 701: "vdzz", 702: "vdaaa", 255: "vdiv"} {
		if got := diskTargetName("vd", n); got != want {
			t.Errorf("diskTargetName(vd, %d) = %q, want %q", n, got, want)
		}
	}
}

// TestVCPUArithmeticCannotOverflow: sockets × cores × threads that wrap
// around in 32 bits are refused, not taken for a few vCPUs.
func TestVCPUArithmeticCannotOverflow(t *testing.T) {
	images, _ := testImages(t)
	for _, cpu := range []v1.CPU{
		{Sockets: 65536, Cores: 65536, Threads: 1},
		{Sockets: 1 << 31, Cores: 2, Threads: 1},
		{Sockets: 3, Cores: 1431655766, Threads: 1},
		{Sockets: 4294967295, Cores: 4294967295, Threads: 4294967295},
		{Sockets: 1, Cores: 1, Threads: 1, MaxSockets: 4294967295},
	} {
		vmi := baseVMI()
		vmi.Spec.Domain.CPU = &cpu
		_, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true})
		if err == nil || !strings.Contains(err.Error(), "spec.domain.cpu") || !strings.Contains(err.Error(), "at most") {
			t.Errorf("cpu %+v: err = %v, want a refusal naming spec.domain.cpu", cpu, err)
		}
	}
}

// TestNoOptionSeparatorReachesTheCommandLine: whatever an interface's
// name, MAC address or ports carry, no value of the VMI adds an option to
// QEMU's -netdev or -device: either Convert refuses it, or the command
// line has only the options the converter writes.
func TestNoOptionSeparatorReachesTheCommandLine(t *testing.T) {
	images, _ := testImages(t)
	const payload = "romfile=/etc/shadow"
	for _, c := range []struct {
		name string
		edit func(*v1.Interface)
	}{
		{"name", func(i *v1.Interface) { i.Name = "x," + payload }},
		{"name with hostfwd", func(i *v1.Interface) { i.Name = "x,hostfwd=tcp:0.0.0.0:2222-:22," + payload }},
		{"MAC address", func(i *v1.Interface) { i.MacAddress = "52:54:00:12:34:56," + payload }},
		{"MAC address after a newline", func(i *v1.Interface) { i.MacAddress = "52:54:00:12:34:56\n," + payload }},
		{"port name", func(i *v1.Interface) { i.Ports[0].Name = "p," + payload }},
		{"port protocol", func(i *v1.Interface) { i.Ports[0].Protocol = "tcp," + payload }},
		{"model", func(i *v1.Interface) { i.Model = "e1000," + payload }},
	} {
		t.Run(c.name, func(t *testing.T) {
			vmi := baseVMI()
			iface := v1.Interface{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}, Ports: []v1.Port{{Name: "http", Port: 80}}}
			c.edit(&iface)
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{iface}
			vmi.Spec.Networks = []v1.Network{{Name: iface.Name, NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
			conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true})
			if err != nil {
				return // refused: nothing reaches QEMU
			}
			for _, a := range conv.Domain.QEMUCommandline.Args {
				if strings.Contains(a.Value, payload) || strings.Contains(a.Value, "0.0.0.0") {
					t.Errorf("QEMU's command line carries the VMI's option: %q", a.Value)
				}
			}
		})
	}
}

// TestMACRenderedFromParsedValue: the MAC address in the domain and on
// QEMU's command line is the parsed one, in canonical form.
func TestMACRenderedFromParsedValue(t *testing.T) {
	images, _ := testImages(t)
	for _, ports := range [][]v1.Port{nil, {{Port: 80}}} {
		vmi := baseVMI()
		vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", MacAddress: "02-00-00-AA-BB-01", Ports: ports,
			InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}
		vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if ports == nil {
			if got := conv.Domain.Devices.Interfaces[0].MAC.Address; got != "02:00:00:aa:bb:01" {
				t.Errorf("interface MAC %q, want 02:00:00:aa:bb:01", got)
			}
			continue
		}
		if dev := conv.Domain.QEMUCommandline.Args[3].Value; !strings.HasSuffix(dev, ",mac=02:00:00:aa:bb:01") {
			t.Errorf("-device %q does not end in the parsed MAC address", dev)
		}
	}
}

// TestSerialCannotCarryAnOption: a disk's serial reaches QEMU (through
// libvirt, and on the command line when a disk fault replaces the disk
// with its own -device ..., serial=): one with an option separator or a
// control character is refused by KubeVirt's rule; a valid one is kept
// as written.
func TestSerialCannotCarryAnOption(t *testing.T) {
	images, _ := testImages(t)
	img := filepath.Join(t.TempDir(), "d.img")
	if err := os.WriteFile(img, []byte("raw"), 0o644); err != nil {
		t.Fatal(err)
	}
	for serial, ok := range map[string]bool{
		"SN-0001_a.b+c":           true,
		"abc,romfile=/etc/shadow": false,
		"abc=def":                 false,
		"abc\n,drive=x":           false,
		"abc def":                 false,
		strings.Repeat("s", 257):  false,
	} {
		vmi := baseVMI()
		vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d", Serial: serial, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
		vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: img, Type: v1.HostDiskExists}}}}
		conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true})
		switch {
		case ok && err != nil:
			t.Errorf("serial %q: %v", serial, err)
		case ok && conv.Domain.Devices.Disks[0].Serial != serial:
			t.Errorf("serial %q rendered as %q", serial, conv.Domain.Devices.Disks[0].Serial)
		case !ok && (err == nil || !strings.Contains(err.Error(), "spec.domain.devices.disks[0].serial")):
			t.Errorf("serial %.40q: err = %v, want a refusal naming spec.domain.devices.disks[0].serial", serial, err)
		}
	}
}
