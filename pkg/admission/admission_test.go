package admission

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// vmi is a VMI admission takes: a disk on a claim, an interface with a
// port on the pod network, a time zone, two vCPUs.
func vmi() *v1.VirtualMachineInstance {
	tz := v1.ClockOffsetTimezone("Europe/Berlin")
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-1.example", Namespace: "default", UID: "6d3c0000-0000-4000-8000-000000000001"},
		Spec: v1.VirtualMachineInstanceSpec{
			Hostname: "vm-1",
			Domain: v1.DomainSpec{
				CPU:   &v1.CPU{Sockets: 1, Cores: 2, Threads: 1},
				Clock: &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}},
				Devices: v1.Devices{
					Disks: []v1.Disk{{Name: "root", Serial: "SN_1.a+b-c"}},
					Interfaces: []v1.Interface{{Name: "default", MacAddress: "02:00:00:AA:bb:01",
						Ports: []v1.Port{{Name: "http", Port: 80}}}},
				},
			},
			Networks: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "root-claim"}}}}},
		},
	}
}

// TestAdmitRefuses: each class of hostile value, refused with a line that
// names the field, quotes the value and says what is allowed.
func TestAdmitRefuses(t *testing.T) {
	long := strings.Repeat("y", 1<<20)
	for _, c := range []struct {
		name string
		edit func(*v1.VirtualMachineInstance, *Input)
		want []string
	}{
		{"name with a path", func(v *v1.VirtualMachineInstance, _ *Input) { v.Name = "a/../../b" },
			[]string{`field metadata.name: "a/../../b": a lowercase RFC 1123 subdomain`, "contains '/', ',' or '='", "(allowed: an RFC 1123 subdomain"}},
		{"name that is ..", func(v *v1.VirtualMachineInstance, _ *Input) { v.Name = ".." },
			[]string{`field metadata.name: "..": `, "is not a name"}},
		{"namespace with a path", func(v *v1.VirtualMachineInstance, _ *Input) { v.Namespace = "../x" },
			[]string{`field metadata.namespace: "../x": a lowercase RFC 1123 label`}},
		{"uid with a path", func(v *v1.VirtualMachineInstance, _ *Input) { v.UID = "../x" },
			[]string{`field metadata.uid: "../x": is not a UID (allowed: letters, digits`}},
		{"hostname", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Hostname = "a,b" },
			[]string{`field spec.hostname: "a,b"`}},
		{"disk name", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Domain.Devices.Disks[0].Name = "Root_1" },
			[]string{`field spec.domain.devices.disks[0].name: "Root_1": a lowercase RFC 1123 label`}},
		{"volume name", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Volumes[0].Name = "x\ny" },
			[]string{`field spec.volumes[0].name: "x\ny"`, "control character"}},
		{"claim name", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = ".." },
			[]string{`field spec.volumes[0].persistentVolumeClaim.claimName: "..": `}},
		{"dataVolume name", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "../dv"}}
		}, []string{`field spec.volumes[0].dataVolume.name: "../dv"`}},
		{"dataVolumeTemplate name", func(_ *v1.VirtualMachineInstance, in *Input) {
			in.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "a/b"}}}
		}, []string{`field spec.dataVolumeTemplates[0].metadata.name: "a/b"`}},
		{"containerDisk path", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "x", Path: "/disk/../../etc/shadow"}}
		}, []string{`field spec.volumes[0].containerDisk.path: "/disk/../../etc/shadow": spec.volumes[0].containerDisk.path must be an absolute path to a file without relative components`}},
		{"kernel path", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "x", KernelPath: "boot/vmlinuz"}}}
		}, []string{`field spec.domain.firmware.kernelBoot.container.kernelPath: "boot/vmlinuz"`, "absolute path"}},
		{"interface name", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Domain.Devices.Interfaces[0].Name = "x,hostfwd=tcp:0.0.0.0:2222-:22"
		}, []string{`field spec.domain.devices.interfaces[0].name: "x,hostfwd=tcp:0.0.0.0:2222-:22": Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)`}},
		{"network name", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Networks[0].Name = "a=b" },
			[]string{`field spec.networks[0].name: "a=b": Network interface name can only contain`}},
		{"MAC with an option", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Domain.Devices.Interfaces[0].MacAddress = "52:54:00:12:34:56,romfile=/etc/shadow"
		}, []string{`field spec.domain.devices.interfaces[0].macAddress: "52:54:00:12:34:56,romfile=/etc/shadow": interface spec.domain.devices.interfaces[0].name has malformed MAC address (allowed: 6 bytes`}},
		{"MAC too long", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:00:5e:10:00:00:00:01"
		}, []string{"too long MAC address"}},
		{"port name", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Domain.Devices.Interfaces[0].Ports[0].Name = "web,x=y"
		},
			[]string{`field spec.domain.devices.interfaces[0].ports[0].name: "web,x=y": Invalid name of the port (allowed: an IANA service name`}},
		{"serial characters", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Domain.Devices.Disks[0].Serial = "a b" },
			[]string{`field spec.domain.devices.disks[0].serial: "a b": spec.domain.devices.disks[0] must be made up of the following characters [A-Za-z0-9_.+-], if specified`}},
		{"serial length", func(v *v1.VirtualMachineInstance, _ *Input) { v.Spec.Domain.Devices.Disks[0].Serial = long },
			[]string{`field spec.domain.devices.disks[0].serial: "yyyy`, "… (1048576 bytes): spec.domain.devices.disks[0] must be less than or equal to 256 in length, if specified"}},
		{"time zone path", func(v *v1.VirtualMachineInstance, _ *Input) {
			tz := v1.ClockOffsetTimezone("../../../etc/shadow")
			v.Spec.Domain.Clock.Timezone = &tz
		}, []string{`field spec.domain.clock.timezone: "../../../etc/shadow": is not a time zone name (allowed: an IANA time zone name`}},
		{"time zone absolute", func(v *v1.VirtualMachineInstance, _ *Input) {
			tz := v1.ClockOffsetTimezone("/etc/shadow")
			v.Spec.Domain.Clock.Timezone = &tz
		}, []string{`"/etc/shadow": is not a time zone name`}},
		{"time zone unknown", func(v *v1.VirtualMachineInstance, _ *Input) {
			tz := v1.ClockOffsetTimezone("Mars/Olympus_Mons")
			v.Spec.Domain.Clock.Timezone = &tz
		}, []string{`"Mars/Olympus_Mons": is not a time zone this host knows`}},
		{"inline userData", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: long}}})
		}, []string{"field spec.volumes[1].cloudInitConfigDrive.userData: 1048576 bytes: spec.volumes[1].cloudInitConfigDrive userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data."}},
		{"inline userData and networkDataBase64, both named", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{
				UserData: strings.Repeat("u", 2049), NetworkDataBase64: base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 4000)))}}})
		}, []string{"field spec.volumes[1].cloudInitNoCloud.userData: 2049 bytes: spec.volumes[1].cloudInitNoCloud userdata exceeds 2048 byte limit.",
			"field spec.volumes[1].cloudInitNoCloud.networkDataBase64: 4000 bytes: spec.volumes[1].cloudInitNoCloud networkdata exceeds 2048 byte limit. Should use NetworkDataSecretRef for larger data."}},
		{"257 disks", func(v *v1.VirtualMachineInstance, _ *Input) {
			for i := range 256 {
				v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: fmt.Sprintf("d%d", i)})
			}
		}, []string{"field spec.domain.devices.disks: Too many: 257: must have at most 256 items"}},
		{"257 networks", func(v *v1.VirtualMachineInstance, _ *Input) {
			for i := range 256 {
				v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: fmt.Sprintf("n%d", i), NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}})
			}
		}, []string{"field spec.networks: Too many: 257: must have at most 256 items"}},
		{"vCPUs overflowing 32 bits", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Domain.CPU = &v1.CPU{Sockets: 65536, Cores: 65536, Threads: 1}
		}, []string{"field spec.domain.cpu: sockets 65536 × cores 65536 × threads 1 is more than 64 vCPUs (allowed: at most 64"}},
		{"hostDisk without its gate", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/x", Type: v1.HostDiskExists}}
		}, []string{"field spec.volumes[0].hostDisk: the HostDisk feature gate is not enabled (--feature-gates HostDisk)"}},
		{"hostDisk under the other gate", func(v *v1.VirtualMachineInstance, in *Input) {
			v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/x", Type: v1.HostDiskExists}}
			in.FeatureGates = []string{launcherapi.GateSidecar}
		}, []string{"the HostDisk feature gate is not enabled"}},
		{"hook sidecars without their gate", func(v *v1.VirtualMachineInstance, _ *Input) {
			v.Annotations = map[string]string{manifest.HookSidecarsAnnotation: "[]"}
		}, []string{"field metadata.annotations.hooks.kubevirt.io/hookSidecars: the Sidecar feature gate is not enabled (--feature-gates Sidecar)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := vmi()
			in := Input{VMI: v}
			c.edit(v, &in)
			err := Admit(in)
			if err == nil {
				t.Fatal("admitted")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal does not say %q:\n%.1500s", w, msg)
				}
			}
			if len(msg) > 1500 {
				t.Errorf("refusal is %d bytes: want the input cut", len(msg))
			}
		})
	}
}

// TestAdmitTakes is the positive control: the base VMI, and the gated
// features under their gates.
func TestAdmitTakes(t *testing.T) {
	if err := Admit(Input{VMI: vmi()}); err != nil {
		t.Fatalf("base VMI: %v", err)
	}
	v := vmi()
	v.Annotations = map[string]string{manifest.HookSidecarsAnnotation: "[]"}
	v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/x", Type: v1.HostDiskExists}}
	v.Spec.Domain.CPU = &v1.CPU{Sockets: 4, Cores: 8, Threads: 2, MaxSockets: 16}
	for i := range 255 {
		v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: fmt.Sprintf("d%d", i)})
	}
	if err := Admit(Input{VMI: v, FeatureGates: launcherapi.FeatureGateNames()}); err != nil {
		t.Fatalf("gated VMI under its gates: %v", err)
	}
}

// TestManyCausesCut: thousands of bad names give ten lines and a count.
func TestManyCausesCut(t *testing.T) {
	v := vmi()
	for range 1000 {
		v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: strings.Repeat("X", 1000)})
	}
	err := Admit(Input{VMI: v})
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxLines+1 || !strings.HasPrefix(lines[maxLines], "and ") {
		t.Fatalf("%d lines, last %.200q", len(lines), lines[len(lines)-1])
	}
	if len(err.Error()) > 10_000 {
		t.Fatalf("refusal is %d bytes", len(err.Error()))
	}
}

// TestTopologyCannotOverflow: products that wrap in 32 or 64 bits are
// refused; the largest allowed ones are counted exactly.
func TestTopologyCannotOverflow(t *testing.T) {
	for _, cpu := range []v1.CPU{
		{Sockets: 65536, Cores: 65536, Threads: 1},
		{Sockets: 4294967295, Cores: 4294967295, Threads: 4294967295},
		{Sockets: 3, Cores: 1431655766, Threads: 1},
		{Sockets: 1, Cores: 2, Threads: 1, MaxSockets: 2147483648},
	} {
		if _, err := Topology(&cpu); err == nil {
			t.Errorf("%+v accepted", cpu)
		}
	}
	got, err := Topology(&v1.CPU{Sockets: 2, Cores: 4, Threads: 8, MaxSockets: 8})
	if err != nil || got.Enabled != 64 || got.Total != 256 {
		t.Fatalf("Topology(2×4×8, max 8 sockets) = %+v, %v; want 64 enabled, 256 in all", got, err)
	}
	if got, err := Topology(nil); err != nil || got.Enabled != 1 || got.Total != 1 {
		t.Fatalf("Topology(nil) = %+v, %v", got, err)
	}
}

// TestQuote: short values whole, long ones cut on a rune boundary with
// their length.
func TestQuote(t *testing.T) {
	if got := launcherapi.Quote("a,b"); got != `"a,b"` {
		t.Errorf("launcherapi.Quote(a,b) = %s", got)
	}
	got := launcherapi.Quote(strings.Repeat("é", 300))
	if !strings.HasSuffix(got, "… (600 bytes)") || strings.Contains(got, `\x`) || len(got) > 230 {
		t.Errorf("launcherapi.Quote(600 bytes) = %s", got)
	}
}
