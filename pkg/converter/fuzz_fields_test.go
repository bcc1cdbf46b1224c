package converter_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// fieldsVMI is the manifest FuzzConvertFields splices its values into: a
// VMI with the given names, an interface with forwarded ports and a MAC
// address, a disk with a serial on a volume of the given kind, extra
// container disks and the given CPU topology, as JSON (which is YAML).
func fieldsVMI(name, namespace, volume, mac, iface, serial string, sockets, cores, threads uint32, extraDisks uint8, kind uint8, efi bool) []byte {
	volumes := []any{map[string]any{"name": volume}}
	switch kind % 3 {
	case 0:
		volumes[0].(map[string]any)["cloudInitNoCloud"] = map[string]any{"userData": "#cloud-config\n"}
	case 1:
		volumes[0].(map[string]any)["emptyDisk"] = map[string]any{"capacity": "1Gi"}
	default:
		volumes[0].(map[string]any)["containerDisk"] = map[string]any{"image": "localhost/crashloop/test-guest:latest"}
	}
	disks := []any{map[string]any{"name": volume, "serial": serial, "disk": map[string]any{}}}
	for i := range int(extraDisks % 41) {
		n := fmt.Sprintf("extra%d", i)
		disks = append(disks, map[string]any{"name": n})
		volumes = append(volumes, map[string]any{"name": n, "containerDisk": map[string]any{"image": "localhost/crashloop/test-guest:latest"}})
	}
	firmware := map[string]any{"kernelBoot": map[string]any{"container": map[string]any{
		"image": "localhost/crashloop/test-guest:latest", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initrd.img"}}}
	if efi {
		firmware["bootloader"] = map[string]any{"efi": map[string]any{"secureBoot": false}}
	}
	vmi := map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "namespace": namespace, "uid": "6d3c1c5e-0b6a-4a43-9f43-0c3a3c6a9e01"},
		"spec": map[string]any{
			"domain": map[string]any{
				"cpu":      map[string]any{"sockets": sockets, "cores": cores, "threads": threads},
				"memory":   map[string]any{"guest": "256Mi"},
				"firmware": firmware,
				"devices": map[string]any{
					"disks": disks,
					"interfaces": []any{map[string]any{"name": iface, "masquerade": map[string]any{}, "macAddress": mac,
						"ports": []any{map[string]any{"port": 22}}}},
				},
			},
			"networks": []any{map[string]any{"name": iface, "pod": map[string]any{}}},
			"volumes":  volumes,
		},
	}
	data, _ := json.Marshal(vmi)
	return data
}

// FuzzConvertFields is FuzzConvert with the manifest's structure fixed and
// the fields of the hostile classes fuzzed: the names that become paths,
// the values that reach QEMU's command line, the disk count and the CPU
// topology. Byte mutations of YAML rarely reach those fields; here every
// mutation does. A '^' in a name stands for "../", as a fuzzer dictionary
// would, so that one mutation climbs a folder. Its seeds are a mutation or two away from each class and
// pass on today's code.
func FuzzConvertFields(f *testing.F) {
	f.Add("vm", "default", "a/^b", "52:54:00:12:34:56", "default", "abc-1.2", uint32(1), uint32(2), uint32(1), uint8(0), uint8(0), false)
	f.Add("vm.1", "ns-1", "root", "02:00:00:00:00:01", "net.1", "", uint32(2), uint32(1), uint32(2), uint8(3), uint8(2), true)
	f.Add("x", "y", "scratch", "52:54:00:AB:CD:EF", "x", "s", uint32(4), uint32(4), uint32(4), uint8(25), uint8(1), false)
	env := newConvertEnv(f)
	f.Fuzz(func(t *testing.T, name, namespace, volume, mac, iface, serial string, sockets, cores, threads uint32, extraDisks, kind uint8, efi bool) {
		up := strings.NewReplacer("^", "../")
		name, namespace, volume = up.Replace(name), up.Replace(namespace), up.Replace(volume)
		data := fieldsVMI(name, namespace, volume, mac, iface, serial, sockets, cores, threads, extraDisks, kind, efi)
		if problems, _ := env.run(t, data); len(problems) > 0 {
			t.Fatalf("%d properties broken for\n%s\n- %s", len(problems), data, strings.Join(problems, "\n- "))
		}
	})
}
