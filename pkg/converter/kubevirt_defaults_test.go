package converter

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// TestTPM: tpm: {} passes CheckSupported (an empty object that asks for a
// device) and renders as KubeVirt v1.6.0 renders it: tpm-tis on the
// emulator backend, TPM 2.0. enabled: false renders none; persistent: true
// is refused by name with the reason, in one short line.
func TestTPM(t *testing.T) {
	raw := map[string]any{"spec": map[string]any{"domain": map[string]any{
		"devices": map[string]any{"tpm": map[string]any{}, "disks": []any{map[string]any{"name": "d", "disk": map[string]any{}}}},
	}}}
	if err := CheckSupported(raw); err != nil {
		t.Fatalf("CheckSupported(tpm: {}) = %v, want it accepted", err)
	}
	images, _ := testImages(t)
	want := []libvirtxml.DomainTPM{{Model: "tpm-tis", Backend: &libvirtxml.DomainTPMBackend{Emulator: &libvirtxml.DomainTPMBackendEmulator{Version: "2.0"}}}}
	for _, c := range []struct {
		name string
		tpm  *v1.TPMDevice
		want []libvirtxml.DomainTPM
		err  string
	}{
		{"unset", nil, nil, ""},
		{"empty", &v1.TPMDevice{}, want, ""},
		{"persistent false", &v1.TPMDevice{Enabled: on(), Persistent: off()}, want, ""},
		{"disabled", &v1.TPMDevice{Enabled: off()}, nil, ""},
		{"persistent", &v1.TPMDevice{Persistent: on()}, nil, "field spec.domain.devices.tpm.persistent: a persistent vTPM keeps its state on KubeVirt's backend-storage PVC"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Spec.Domain.Devices.TPM = c.tpm
			conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: t.TempDir()})
			if c.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.err) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 200 {
					t.Fatalf("Convert(tpm %+v) = %v, want one short line starting %q", c.tpm, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, roundTrip(t, conv.Domain).Devices.TPMs, noXMLName); diff != "" {
				t.Errorf("tpm (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKubeVirtDefaultDevices: the memory balloon and the display that
// KubeVirt attaches unless the autoattach fields say false.
func TestKubeVirtDefaultDevices(t *testing.T) {
	images, _ := testImages(t)
	ovmf := fakeOVMF(t)
	wantBalloon := &libvirtxml.DomainMemBalloon{Model: "virtio-non-transitional", FreePageReporting: "on", Stats: &libvirtxml.DomainMemBalloonStats{Period: 10}}
	for _, c := range []struct {
		name    string
		edit    func(vmi *v1.VirtualMachineInstance)
		balloon *libvirtxml.DomainMemBalloon
		video   *libvirtxml.DomainVideoModel
	}{
		{"defaults", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Devices = v1.Devices{} },
			wantBalloon, &libvirtxml.DomainVideoModel{Type: "vga", Heads: 1, VRam: 16384}},
		{"explicit true", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices = v1.Devices{AutoattachMemBalloon: on(), AutoattachGraphicsDevice: on()}
		}, wantBalloon, &libvirtxml.DomainVideoModel{Type: "vga", Heads: 1, VRam: 16384}},
		{"bochs under EFI", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices = v1.Devices{}
			vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: off()}}
		}, wantBalloon, &libvirtxml.DomainVideoModel{Type: "bochs", Heads: 1}},
		{"both off", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices = v1.Devices{AutoattachMemBalloon: off(), AutoattachGraphicsDevice: off()}
		}, &libvirtxml.DomainMemBalloon{Model: "none"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			vmi := baseVMI()
			c.edit(vmi)
			// A folder that does not exist yet: QEMU binds sockets in it.
			scratch := filepath.Join(t.TempDir(), "scratch")
			conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: scratch, OVMF: ovmf})
			if err != nil {
				t.Fatal(err)
			}
			d := roundTrip(t, conv.Domain)
			// libvirt's own channel path under an embedded root is too
			// long for a unix socket: the launcher names a short one.
			if ch := d.Devices.Channels; len(ch) != 1 || ch[0].Source.UNIX.Path != filepath.Join(scratch, "qga.sock") {
				t.Errorf("guest agent channel = %+v, want its socket at %s", ch, filepath.Join(scratch, "qga.sock"))
			}
			if diff := cmp.Diff(c.balloon, d.Devices.MemBalloon, noXMLName); diff != "" {
				t.Errorf("balloon (-want +got):\n%s", diff)
			}
			if fi, err := os.Stat(scratch); err != nil || !fi.IsDir() {
				t.Errorf("per-VMI folder %s not made: %v", scratch, err)
			}
			if c.video == nil {
				if len(d.Devices.Videos)+len(d.Devices.Graphics) != 0 {
					t.Errorf("display attached: %+v %+v", d.Devices.Videos, d.Devices.Graphics)
				}
				return
			}
			if len(d.Devices.Videos) != 1 || d.Devices.Videos[0].Model != *c.video {
				t.Errorf("video = %+v, want %+v", d.Devices.Videos, c.video)
			}
			if len(d.Devices.Graphics) != 1 || d.Devices.Graphics[0].VNC == nil || len(d.Devices.Graphics[0].VNC.Listeners) != 1 ||
				d.Devices.Graphics[0].VNC.Listeners[0].Socket.Socket != filepath.Join(scratch, "virt-vnc") {
				t.Errorf("graphics = %+v, want VNC on %s", d.Devices.Graphics, filepath.Join(scratch, "virt-vnc"))
			}
		})
	}
}

// TestCloudInitDiskWritable: KubeVirt does not mark the cloud-init disk
// read-only.
func TestCloudInitDiskWritable(t *testing.T) {
	if _, err := exec.LookPath("xorrisofs"); err != nil {
		t.Skip("xorrisofs is not installed (make deps)")
	}
	images, _ := testImages(t)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}}}
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(conv.Domain.Devices.Disks) != 1 || conv.Domain.Devices.Disks[0].ReadOnly != nil {
		t.Fatalf("cloud-init disk = %+v, want one writable disk", conv.Domain.Devices.Disks)
	}
}

// TestSchedulingFieldsAccepted: the scheduler's fields change nothing in
// KubeVirt's domain, and virt-handler hands VMIs over with them (a VMI
// pinned to a node carries spec.nodeSelector), so they must not be refused.
func TestSchedulingFieldsAccepted(t *testing.T) {
	raw := map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"spec": map[string]any{
			"nodeSelector":  map[string]any{"kubernetes.io/hostname": "node01"},
			"schedulerName": "default-scheduler",
			"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
				"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "k", "operator": "In", "values": []any{"v"}}}}}}}},
			"tolerations":               []any{map[string]any{"key": "k", "operator": "Exists", "effect": "NoSchedule"}},
			"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}},
		},
	}
	if err := CheckSupported(raw); err != nil {
		t.Fatalf("CheckSupported(scheduling fields) = %v, want nil", err)
	}
	// A field beside them is still refused by name.
	raw["spec"].(map[string]any)["dnsPolicy"] = "None"
	if err := CheckSupported(raw); err == nil || !strings.HasPrefix(err.Error(), "field spec.dnsPolicy: is not supported") {
		t.Fatalf("CheckSupported(dnsPolicy) = %v, want a refusal naming spec.dnsPolicy", err)
	}
}

// TestClockOffsetAsKubeVirt: utc with offsetSeconds is offset="utc" with
// the seconds as adjustment, as KubeVirt's converter writes it (libvirt
// turns it into a variable clock itself).
func TestClockOffsetAsKubeVirt(t *testing.T) {
	images, _ := testImages(t)
	vmi := baseVMI()
	offset := 3600
	vmi.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{OffsetSeconds: &offset}}}
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&libvirtxml.DomainClock{Offset: "utc", Adjustment: "3600"}, roundTrip(t, conv.Domain).Clock); diff != "" {
		t.Errorf("clock (-want +got):\n%s", diff)
	}
}
