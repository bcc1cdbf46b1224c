package converter

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// supportedFields are the manifest field paths (arrays written as []) the
// launcher honours. Everything under a path ending in ".*" is accepted.
// Any other field that a manifest sets is refused by CheckSupported, so that
// nothing a user asks for is silently dropped.
func supportedFields() []string {
	return []string{
		"apiVersion", "kind", "metadata.*", "status.*",
		"spec.terminationGracePeriodSeconds",
		// What KubeVirt's mutating webhook adds to every VMI: checked or
		// honoured by BuildDomain (architecture, CPU model and limit,
		// the pod network), or without effect on a single launch
		// (evictionStrategy is a cluster policy).
		"spec.architecture", "spec.evictionStrategy",
		// Scheduling fields: the scheduler's, not the launcher's. KubeVirt's
		// converter does not read them, so they change nothing in the
		// domain, and KubeVirt's launcher takes VMIs that carry them (in
		// KubeVirt mode virt-handler hands over VMIs as users wrote them).
		"spec.priorityClassName", "spec.schedulerName", "spec.nodeSelector.*", "spec.affinity.*",
		"spec.tolerations[].*", "spec.topologySpreadConstraints[].*",
		"spec.domain.cpu.model", "spec.domain.cpu.maxSockets",
		"spec.domain.devices.interfaces[].name",
		"spec.networks[].name",
		// The pod network through QEMU's user-mode network, ports
		// forwarded from loopback.
		"spec.domain.devices.interfaces[].model", "spec.domain.devices.interfaces[].macAddress",
		"spec.domain.devices.interfaces[].ports[].name", "spec.domain.devices.interfaces[].ports[].port",
		"spec.domain.devices.interfaces[].ports[].protocol",
		"spec.hostname",
		"spec.domain.cpu.cores", "spec.domain.cpu.sockets", "spec.domain.cpu.threads",
		"spec.domain.memory.guest", "spec.domain.memory.maxGuest",
		"spec.domain.resources.requests.memory", "spec.domain.resources.requests.cpu",
		"spec.domain.machine.type",
		"spec.domain.features.acpi.enabled",
		"spec.domain.features.apic.enabled", "spec.domain.features.apic.endOfInterrupt",
		"spec.domain.features.smm.enabled",
		"spec.domain.features.hyperv.*",
		"spec.domain.clock.utc.offsetSeconds", "spec.domain.clock.timezone",
		"spec.domain.clock.timer.*",
		"spec.domain.firmware.uuid", "spec.domain.firmware.serial",
		"spec.domain.firmware.bootloader.bios.useSerial",
		"spec.domain.firmware.bootloader.efi.secureBoot",
		"spec.domain.firmware.kernelBoot.kernelArgs",
		"spec.domain.firmware.kernelBoot.container.image",
		"spec.domain.firmware.kernelBoot.container.kernelPath",
		"spec.domain.firmware.kernelBoot.container.initrdPath",
		"spec.domain.firmware.kernelBoot.container.imagePullPolicy",
		// Empty objects that choose something: the binding, the network,
		// the device kind, a feature, the bootloader, the clock.
		"spec.domain.devices.interfaces[].masquerade", "spec.domain.devices.interfaces[].bridge",
		"spec.networks[].pod", "spec.domain.devices.disks[].disk", "spec.domain.devices.disks[].cdrom",
		"spec.domain.features.acpi", "spec.domain.features.apic", "spec.domain.features.smm",
		"spec.domain.firmware.bootloader.efi", "spec.domain.firmware.bootloader.bios",
		"spec.domain.clock.utc",
		"spec.domain.devices.disks[].name",
		"spec.domain.devices.disks[].disk.bus",
		"spec.domain.devices.disks[].disk.readonly",
		"spec.domain.devices.disks[].serial",
		"spec.domain.devices.disks[].bootOrder",
		"spec.domain.devices.disks[].cdrom.bus", "spec.domain.devices.disks[].cdrom.readonly",
		"spec.domain.devices.disks[].cdrom.tray",
		"spec.domain.devices.rng",
		// A transient vTPM (libvirt runs swtpm); persistent: true is
		// refused by setTPM with the reason.
		"spec.domain.devices.tpm", "spec.domain.devices.tpm.enabled", "spec.domain.devices.tpm.persistent",
		"spec.domain.devices.autoattachSerialConsole",
		"spec.domain.devices.autoattachGraphicsDevice",
		"spec.domain.devices.autoattachMemBalloon",
		"spec.domain.devices.autoattachPodInterface",
		"spec.volumes[].name",
		"spec.volumes[].hostDisk.path", "spec.volumes[].hostDisk.type", "spec.volumes[].hostDisk.capacity",
		"spec.volumes[].containerDisk.image", "spec.volumes[].containerDisk.path",
		"spec.volumes[].containerDisk.imagePullPolicy",
		"spec.volumes[].persistentVolumeClaim.claimName", "spec.volumes[].persistentVolumeClaim.readOnly",
		"spec.volumes[].dataVolume.name",
		"spec.volumes[].ephemeral.persistentVolumeClaim.claimName",
		"spec.volumes[].emptyDisk.capacity",
		// secretRef and networkDataSecretRef are refused by Convert with
		// the reason (no cluster secrets).
		"spec.volumes[].cloudInitNoCloud.*", "spec.volumes[].cloudInitConfigDrive.*",
	}
}

// UnsupportedFieldError names a manifest field the launcher cannot honour.
type UnsupportedFieldError struct {
	Field string
	Why   string
}

func (e *UnsupportedFieldError) Error() string {
	return fmt.Sprintf("field %s: %s", e.Field, e.Why)
}

// refusedWhy says, for fields people do write, why the launcher cannot
// honour them; any other unsupported field gets the generic reason.
var refusedWhy = map[string]string{
	"spec.domain.cpu.dedicatedCpuPlacement":        "dedicated CPUs need the kubelet's CPU manager",
	"spec.domain.cpu.isolateEmulatorThread":        "dedicated CPUs need the kubelet's CPU manager",
	"spec.domain.devices.interfaces[].sriov":       "SR-IOV functions are another node's hardware, handed over by a device plugin",
	"spec.networks[].multus.networkName":           "secondary networks need Multus and a CNI; one machine has only the pod network",
	"spec.domain.devices.gpus[].deviceName":        "GPUs are another node's hardware, handed over by a device plugin",
	"spec.domain.devices.gpus[].claimName":         "GPUs are another node's hardware, handed over by DRA",
	"spec.domain.devices.hostDevices[].deviceName": "host devices are another node's hardware, handed over by a device plugin",
}

// SupportedFieldsHelp is where an unsupported-field error sends the user.
const SupportedFieldsHelp = "the README's \"Supported manifest fields\" lists what is"

// CheckSupported walks a manifest as generic JSON and returns an error
// naming the first (in sorted order) field that is set but not honoured.
// Empty arrays and nulls count as not set; an empty object counts as set
// (tpm: {} asks for a device) unless it only groups supported fields.
func CheckSupported(raw map[string]any) error {
	allowed := supportedFields()
	var set []string
	collectLeaves("", raw, &set)
	sort.Strings(set)
	for _, path := range set {
		if strings.HasSuffix(path, "{}") {
			p := strings.TrimSuffix(path, "{}")
			if fieldAllowed(allowed, p) || groupsAllowed(allowed, arrayIndex(p)) {
				continue
			}
			path = p
		}
		if !fieldAllowed(allowed, path) {
			why, ok := refusedWhy[arrayIndex(path)]
			if !ok {
				why = "the launcher does not honour it"
			}
			return &UnsupportedFieldError{Field: path, Why: "is not supported: " + why + " (" + SupportedFieldsHelp + ")"}
		}
	}
	return nil
}

// SupportedFields lists the manifest fields the launcher honours, for the
// README and for help output; "x.*" means everything under x.
func SupportedFields() []string { return supportedFields() }

// groupsAllowed says whether some supported field lies under path, so
// that an empty object at path only groups fields (resources: {}).
func groupsAllowed(allowed []string, path string) bool {
	for _, a := range allowed {
		if strings.HasPrefix(a, path+".") {
			return true
		}
	}
	return false
}

func fieldAllowed(allowed []string, path string) bool {
	generic := arrayIndex(path)
	for _, a := range allowed {
		if a == generic {
			return true
		}
		if prefix, ok := strings.CutSuffix(a, ".*"); ok && (generic == prefix || strings.HasPrefix(generic, prefix+".")) {
			return true
		}
	}
	return false
}

// arrayIndex turns "a[3].b" into "a[].b".
func arrayIndex(path string) string {
	var b strings.Builder
	skipping := false
	for _, r := range path {
		switch {
		case r == '[':
			skipping = true
			b.WriteString("[]")
		case r == ']':
			skipping = false
		case !skipping:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func collectLeaves(prefix string, v any, out *[]string) {
	switch t := v.(type) {
	case nil:
	case map[string]any:
		if len(t) == 0 && prefix != "" {
			*out = append(*out, prefix+"{}")
			return
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			collectLeaves(p, t[k], out)
		}
	case []any:
		if len(t) == 0 {
			return
		}
		allScalar := true
		for i, e := range t {
			switch e.(type) {
			case map[string]any, []any:
				allScalar = false
				collectLeaves(fmt.Sprintf("%s[%d]", prefix, i), e, out)
			}
		}
		if allScalar {
			*out = append(*out, prefix)
		}
	default:
		*out = append(*out, prefix)
	}
}
