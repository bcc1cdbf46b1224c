package launchprep

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// baseVMI is a VMI that a dry run takes: one disk on a claim in the test's
// claim folder (claim "root", made by dryRun).
func baseVMI() *v1.VirtualMachineInstance {
	mem := resource.MustParse("64Mi")
	return &v1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: "default", UID: "6d3c0000-0000-4000-8000-0000000000aa"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory: &v1.Memory{Guest: &mem},
				Devices: v1.Devices{
					Disks: []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}},
				},
			},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: k8sPVC("root")}}}},
		},
	}
}

// withPorts gives the VMI an interface on the pod network named name, with
// a forwarded port: the interface QEMU's command line carries.
func withPorts(vmi *v1.VirtualMachineInstance, name, mac string, port v1.Port) {
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: name, MacAddress: mac, Ports: []v1.Port{port},
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []v1.Network{{Name: name, NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
}

// dryRun runs the converter stage's Prepare on obj (a VMI or a VM) as
// `virt-launcher --dry-run` would, with TMPDIR a fresh empty folder, and returns the exit
// code, stderr, the domain XML and what the run left in TMPDIR.
func dryRun(t *testing.T, obj any, flags ...string) (launcherapi.ExitCode, string, string, []string) {
	t.Helper()
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	claims := filepath.Join(dir, "claims")
	for _, d := range []string{tmp, filepath.Join(claims, "root")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(claims, "root", "disk.img"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	argv := append([]string{"--dry-run", "--accel", "tcg", "--claim-dir", claims, "--image-dir", filepath.Join(dir, "images"),
		"--console-log", filepath.Join(dir, "logs", "console.log"), "--runtime-dir", filepath.Join(dir, "run")}, flags...)
	args, _, code, ok := launchplan.Begin(append(argv, "vmi.json"), launcherapi.DefaultArgs(), &stderr)
	if !ok {
		return code, stderr.String(), "", nil
	}
	p, code := Prepare(context.Background(), Options{Request: launchplan.Request{Args: args, Input: "vmi.json", Manifest: data}, Stderr: &stderr})
	xml := ""
	if p != nil {
		xml = p.Plan.DomainXML
		p.Abandon()
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	return code, stderr.String(), xml, left
}

// TestHostileManifestsRefused: every class of hostile value is refused
// with exit 5, one message naming the field, quoting the value (cut to
// about 200 bytes) and saying what is allowed, before anything is made.
func TestHostileManifestsRefused(t *testing.T) {
	big := strings.Repeat("A", 3000)
	for _, c := range []struct {
		name  string
		edit  func(*v1.VirtualMachineInstance)
		flags []string
		want  []string
	}{
		{"metadata.name with ../", func(v *v1.VirtualMachineInstance) { v.Name = "../../etc/x" },
			nil, []string{"metadata.name", `"../../etc/x"`, "RFC 1123 subdomain"}},
		{"metadata.namespace with ../", func(v *v1.VirtualMachineInstance) { v.Namespace = "../etc" },
			nil, []string{"metadata.namespace", `"../etc"`, "RFC 1123 label"}},
		{"metadata.uid with ../", func(v *v1.VirtualMachineInstance) { v.UID = "../../x" },
			nil, []string{"metadata.uid", `"../../x"`}},
		{"volume and disk name with ../", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Name, v.Spec.Volumes[0].Name = "../../x", "../../x"
		}, nil, []string{"spec.domain.devices.disks[0].name", `"../../x"`, "RFC 1123 label"}},
		{"claim name with ../", func(v *v1.VirtualMachineInstance) {
			v.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "../../etc"
		}, nil, []string{"spec.volumes[0].persistentVolumeClaim.claimName", `"../../etc"`}},
		{"interface name with hostfwd", func(v *v1.VirtualMachineInstance) {
			withPorts(v, "x,hostfwd=tcp:0.0.0.0:2222-:22", "", v1.Port{Port: 80})
		}, nil, []string{"spec.domain.devices.interfaces[0].name", `"x,hostfwd=tcp:0.0.0.0:2222-:22"`, "dashes (-) or underscores (_)"}},
		{"MAC address with romfile", func(v *v1.VirtualMachineInstance) {
			withPorts(v, "default", "52:54:00:12:34:56,romfile=/etc/shadow", v1.Port{Port: 80})
		}, nil, []string{"spec.domain.devices.interfaces[0].macAddress", `"52:54:00:12:34:56,romfile=/etc/shadow"`, "malformed MAC address"}},
		{"port name with a comma", func(v *v1.VirtualMachineInstance) {
			withPorts(v, "default", "", v1.Port{Name: "a,b=c", Port: 80})
		}, nil, []string{"spec.domain.devices.interfaces[0].ports[0].name", `"a,b=c"`, "Invalid name of the port"}},
		{"disk serial with a comma", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Serial = "abc,romfile=/etc/shadow"
		}, nil, []string{"spec.domain.devices.disks[0].serial", `"abc,romfile=/etc/shadow"`, "[A-Za-z0-9_.+-]"}},
		{"disk serial too long", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Serial = strings.Repeat("s", 257)
		}, nil, []string{"spec.domain.devices.disks[0].serial", "less than or equal to 256"}},
		{"inline userData over 2048 bytes", func(v *v1.VirtualMachineInstance) {
			addCloudInit(v, &v1.CloudInitNoCloudSource{UserData: big})
		}, nil, []string{"spec.volumes[1].cloudInitNoCloud", "userdata exceeds 2048 byte limit", "UserDataSecretRef"}},
		{"inline networkDataBase64 over 2048 bytes", func(v *v1.VirtualMachineInstance) {
			addCloudInit(v, &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n", NetworkDataBase64: b64(big)})
		}, nil, []string{"spec.volumes[1].cloudInitNoCloud", "networkdata exceeds 2048 byte limit", "NetworkDataSecretRef"}},
		{"257 disks", func(v *v1.VirtualMachineInstance) {
			for i := 1; i <= 256; i++ {
				v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: fmt.Sprintf("d%d", i)})
			}
		}, nil, []string{"spec.domain.devices.disks", "must have at most 256 items"}},
		{"vCPUs that overflow 32 bits", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &v1.CPU{Sockets: 65536, Cores: 65536, Threads: 1}
		}, nil, []string{"spec.domain.cpu", "at most 64"}},
		{"time zone that is a path", func(v *v1.VirtualMachineInstance) {
			tz := v1.ClockOffsetTimezone("../../../etc/shadow")
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}}
		}, nil, []string{"spec.domain.clock.timezone", `"../../../etc/shadow"`, "time zone name"}},
		{"hostDisk without its gate", func(v *v1.VirtualMachineInstance) {
			v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/etc/passwd", Type: v1.HostDiskExists}}
		}, nil, []string{"spec.volumes[0].hostDisk", "the HostDisk feature gate is not enabled (--feature-gates HostDisk)"}},
		{"hook sidecars without their gate", func(v *v1.VirtualMachineInstance) {
			v.Annotations = map[string]string{manifest.HookSidecarsAnnotation: `[{"image": "kubevirt/example-hook-sidecar"}]`}
		}, nil, []string{"metadata.annotations.hooks.kubevirt.io/hookSidecars", "the Sidecar feature gate is not enabled (--feature-gates Sidecar)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vmi := baseVMI()
			c.edit(vmi)
			code, stderr, xml, left := dryRun(t, vmi, c.flags...)
			if code != launcherapi.ExitInvalidManifest {
				t.Errorf("exit %d, want %d (invalid manifest); stderr:\n%s\ndomain:\n%.2000s", code, launcherapi.ExitInvalidManifest, stderr, xml)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%.3000s", w, stderr)
				}
			}
			if len(stderr) > 2000 {
				t.Errorf("stderr is %d bytes; a refusal quotes at most about 200 bytes of input", len(stderr))
			}
			if len(left) != 0 {
				t.Errorf("the refused dry run left %v in TMPDIR", left)
			}
		})
	}
}

// TestAdmissionLetsTheBaseVMIThrough is the positive control of
// TestHostileManifestsRefused: the same VMI untouched, with a forwarded
// port and with each gated feature under its gate, dry-runs.
func TestAdmissionLetsTheBaseVMIThrough(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(*v1.VirtualMachineInstance)
		flags []string
	}{
		{"untouched", func(*v1.VirtualMachineInstance) {}, nil},
		{"a forwarded port, a MAC address and a serial", func(v *v1.VirtualMachineInstance) {
			withPorts(v, "default", "02:00:00:AA:bb:01", v1.Port{Name: "http", Port: 80})
			v.Spec.Domain.Devices.Disks[0].Serial = "SN-0001_a.b+c"
		}, nil},
		{"a time zone", func(v *v1.VirtualMachineInstance) {
			tz := v1.ClockOffsetTimezone("America/New_York")
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}}
		}, nil},
		{"a hostDisk under its gate", func(v *v1.VirtualMachineInstance) {
			v.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/dev/null", Type: v1.HostDiskExists}}
		}, []string{"--feature-gates", "HostDisk"}},
		{"64 vCPUs", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU = &v1.CPU{Sockets: 4, Cores: 8, Threads: 2} }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			vmi := baseVMI()
			c.edit(vmi)
			code, stderr, _, left := dryRun(t, vmi, c.flags...)
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
			if len(left) != 0 {
				t.Errorf("the dry run left %v in TMPDIR", left)
			}
		})
	}
}

// TestHostileVMNameNotEchoed: a VirtualMachine named with a megabyte is
// refused with a short message; its name is not logged before admission.
func TestHostileVMNameNotEchoed(t *testing.T) {
	vmi := baseVMI()
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("v", 1<<20), Namespace: "default"},
		Spec:       v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: vmi.Spec}},
	}
	code, stderr, _, left := dryRun(t, vm)
	if code != launcherapi.ExitInvalidManifest || !strings.Contains(stderr, "field metadata.name: ") {
		t.Errorf("exit %d, want %d naming metadata.name; stderr:\n%.2000s", code, launcherapi.ExitInvalidManifest, stderr)
	}
	if len(stderr) > 2000 {
		t.Errorf("stderr is %d bytes; the name must be quoted cut to about 200 bytes:\n%.600s", len(stderr), stderr)
	}
	if len(left) != 0 {
		t.Errorf("the refused dry run left %v in TMPDIR", left)
	}
}

func addCloudInit(v *v1.VirtualMachineInstance, src *v1.CloudInitNoCloudSource) {
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: src}})
}

func k8sPVC(name string) k8sv1.PersistentVolumeClaimVolumeSource {
	return k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: name}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
