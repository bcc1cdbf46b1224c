package converter_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vmiYAML is a VMI named name in namespace ns whose spec is the given YAML,
// indented under spec: (two spaces per level, as written here).
func vmiYAML(name, ns, spec string) []byte {
	return fmt.Appendf(nil, `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: %q
  namespace: %q
  uid: 6d3c1c5e-0b6a-4a43-9f43-0c3a3c6a9e01
spec:
%s`, name, ns, indent(spec, "  "))
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = by + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// kernelBoot is the test guest's kernel boot, the domain part of most seeds.
const kernelBoot = `firmware:
  kernelBoot:
    kernelArgs: console=ttyS0
    container:
      image: localhost/crashloop/test-guest:latest
      kernelPath: /boot/vmlinuz
      initrdPath: /boot/initrd.img
`

// withDomain is a spec with the test guest's memory and kernel boot, the
// given devices under spec.domain.devices and more spec after it.
func withDomain(devices, rest string) string {
	return "domain:\n  memory:\n    guest: 256Mi\n" + indent(kernelBoot, "  ") +
		"  devices:\n" + indent(devices, "    ") + rest
}

// netSpec is an interface named name (binding and more fields given) on
// the pod network.
func netSpec(name, iface string) (devices, rest string) {
	return fmt.Sprintf("interfaces:\n- name: %q\n%s", name, indent(iface, "  ")),
		fmt.Sprintf("networks:\n- name: %q\n  pod: {}\n", name)
}

// convertSeeds are the repository's examples and one manifest per converter
// path (cloud-init, EFI, forwarded ports, claims, serials, CPU topology),
// some a mutation away from a hostile class, none failing on today's code.
func convertSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) == 0 {
		tb.Fatalf("no examples: %v", err)
	}
	var seeds [][]byte
	for _, p := range examples {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	fwd, fwdRest := netSpec("default", "masquerade: {}\nmacAddress: \"52:54:00:12:34:56\"\nports:\n- port: 22\n- port: 53\n  protocol: UDP\n")
	br, brRest := netSpec("net-1", "bridge: {}\nmacAddress: \"02:00:00:00:00:01\"\nmodel: e1000\n")
	specs := []struct{ name, spec string }{
		{"cloudinit", withDomain("", "volumes:\n- name: cloudinit\n  cloudInitNoCloud:\n    userData: \"#cloud-config\\n\"\n    networkData: \"version: 2\\n\"\n")},
		{"configdrive", withDomain("", "volumes:\n- name: a-b\n  cloudInitConfigDrive:\n    userDataBase64: I2Nsb3VkLWNvbmZpZwo=\n")},
		{"efi", "domain:\n  memory:\n    guest: 256Mi\n  firmware:\n    bootloader:\n      efi:\n        secureBoot: false\n  devices: {}\n" +
			"volumes:\n- name: root\n  containerDisk:\n    image: localhost/crashloop/cloud-guest:latest\n"},
		{"forwarded", withDomain(fwd+"autoattachGraphicsDevice: false\n", fwdRest)},
		{"bridge", withDomain(br, brRest)},
		{"claims", withDomain("disks:\n- name: pvc\n  serial: abc-1.2\n- name: eph\n  cdrom: {}\n", "volumes:\n- name: pvc\n  persistentVolumeClaim:\n    claimName: pvc1\n"+
			"- name: eph\n  ephemeral:\n    persistentVolumeClaim:\n      claimName: dv1\n- name: empty\n  emptyDisk:\n    capacity: 1Gi\n")},
		{"hostdisk", withDomain("", "volumes:\n- name: host\n  hostDisk:\n    path: /dev/null\n    type: Disk\n- name: created\n  hostDisk:\n    path: /var/tmp/never-made.img\n    type: DiskOrCreate\n    capacity: 1Gi\n")},
		{"topology", "domain:\n  memory:\n    guest: 256Mi\n  cpu:\n    sockets: 2\n    cores: 2\n    threads: 2\n    maxSockets: 4\n" + indent(kernelBoot, "  ") + "  devices: {}\n"},
		{"containerdisks", withDomain("", "volumes:\n- name: d0\n  containerDisk:\n    image: localhost/crashloop/test-guest:latest\n"+
			"- name: d1\n  containerDisk:\n    image: example.com/guest:1\n    path: /disk/disk.img\n")},
	}
	for _, s := range specs {
		seeds = append(seeds, vmiYAML(s.name, "default", s.spec))
	}
	seeds = append(seeds, []byte(`apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: dvvm, namespace: ns1}
spec:
  runStrategy: Always
  dataVolumeTemplates:
  - metadata: {name: dv2}
    spec:
      source: {blank: {}}
      storage: {resources: {requests: {storage: 1Gi}}}
  template:
    spec:
      domain:
        memory: {guest: 256Mi}
        devices: {disks: [{name: root, disk: {bus: sata}}]}
      volumes: [{name: root, dataVolume: {name: dv2}}]
`))
	return seeds
}

// hostileConvertInputs are minimized manifests of the classes FuzzConvert
// looks for, each with what its property says on today's code.
func hostileConvertInputs() []struct {
	name, want string
	manifest   []byte
} {
	many := ""
	vols := ""
	for i := range 27 {
		many += fmt.Sprintf("- name: d%d\n", i)
		vols += fmt.Sprintf("- name: d%d\n  containerDisk:\n    image: localhost/crashloop/test-guest:latest\n", i)
	}
	mac, macRest := netSpec("default", "masquerade: {}\nmacAddress: \"52:54:00:12:34:56,romfile=/etc/shadow\"\nports:\n- port: 22\n")
	named, namedRest := netSpec("x,hostfwd=tcp::2222-:22", "masquerade: {}\n")
	efi := "domain:\n  memory:\n    guest: 256Mi\n  firmware:\n    bootloader:\n      efi:\n        secureBoot: false\n  devices: {}\n" +
		"volumes:\n- name: root\n  containerDisk:\n    image: localhost/crashloop/cloud-guest:latest\n"
	return []struct {
		name, want string
		manifest   []byte
	}{
		{"volume name climbs out of the scratch folder", "outside", vmiYAML("vm", "default", withDomain("",
			"volumes:\n- name: a/../../../escaped\n  cloudInitNoCloud:\n    userData: x\n"))},
		{"metadata.name climbs out (EFI variable store, console log)", "outside", vmiYAML("../../../escaped", "default", efi)},
		{"namespace climbs out of the console folder", "outside", vmiYAML("vm", "../../escaped", withDomain("", ""))},
		{"MAC address carries a QEMU option", "QEMU -device", vmiYAML("vm", "default", withDomain(mac, macRest))},
		{"interface name carries a QEMU option", "QEMU -netdev", vmiYAML("vm", "default", withDomain(named, namedRest))},
		{"disk serial carries QEMU's separator", "disk serial", vmiYAML("vm", "default", withDomain("disks:\n- name: d\n  serial: \"abc,def\"\n",
			"volumes:\n- name: d\n  containerDisk:\n    image: localhost/crashloop/test-guest:latest\n"))},
		{"27 disks: the 27th is vd{", "disk target", vmiYAML("vm", "default", withDomain("disks:\n"+many, "volumes:\n"+vols))},
		{"sockets x cores overflows to 1 vCPU", "vCPUs for", vmiYAML("vm", "default",
			"domain:\n  memory:\n    guest: 256Mi\n  cpu:\n    sockets: 641\n    cores: 6700417\n"+indent(kernelBoot, "  ")+"  devices: {}\n")},
	}
}

// TestHostileConvertInputs runs the hostile classes' minimized inputs
// through FuzzConvert's properties: every one must be refused or convert
// without breaking any property. Each broke one before the admission and
// confinement work (the negative control: want names the class).
func TestHostileConvertInputs(t *testing.T) {
	for _, c := range hostileConvertInputs() {
		t.Run(c.name, func(t *testing.T) {
			env := newConvertEnv(t)
			var problems []string
			func() {
				defer func() {
					if r := recover(); r != nil {
						problems = append(problems, fmt.Sprintf("panic: %v", r))
					}
				}()
				problems, _ = env.run(t, c.manifest)
			}()
			if len(problems) > 0 {
				t.Errorf("broken properties:\n- %s", strings.Join(problems, "\n- "))
			}
		})
	}
}

// TestConvertSeedsConvert keeps FuzzConvert's seeds useful: each converts,
// so the fuzzer starts from the converter's paths, not from refusals (but
// for the instancetype example, which needs virt-launcher-expand).
func TestConvertSeedsConvert(t *testing.T) {
	env := newConvertEnv(t)
	for i, s := range convertSeeds(t) {
		if _, _, err := launcherStages(s); err != nil && strings.Contains(err.Error(), "must be expanded first") {
			continue
		}
		if problems, ok := env.run(t, s); !ok || len(problems) > 0 {
			_, _, err := launcherStages(s)
			t.Errorf("seed %d: converted %v, problems %q, stages %v\n%s", i, ok, problems, err, s)
		}
	}
}
