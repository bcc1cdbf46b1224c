// Package kvdefaults applies to a VirtualMachineInstance what KubeVirt
// v1.6.0 applies to every VMI it admits: the API's defaulting functions and
// the mutating webhook (pkg/defaults and pkg/virt-api/webhooks in KubeVirt),
// as they behave with a default KubeVirt configuration on an amd64 node.
// The launcher calls Apply before it converts a VMI to a domain, so that a
// manifest means here what it means in a cluster.
//
// Deliberately left out: status fields the webhook fills (phase,
// guest memory and CPU topology at boot), VMI presets and cluster-wide
// configuration other than KubeVirt's defaults, and the non-root marker.
package kvdefaults

import (
	"strings"

	"github.com/google/uuid"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

// KubeVirt v1.6.0's defaults for a cluster with no KubeVirt configuration
// (pkg/virt-config), on amd64.
const (
	// Architecture is the node's architecture (runtime.GOARCH upstream;
	// the launcher runs amd64 guests only).
	Architecture = "amd64"
	// MachineType is DefaultAMD64MachineType.
	MachineType = "q35"
	// DiskBus is the bus amd64 disks, CD-ROMs and LUNs get (SATA, since
	// q35 has no IDE).
	DiskBus = v1.DiskBusSATA
	// MaxHotplugRatio is DefaultMaxHotplugRatio, with the LiveUpdate
	// rollout strategy KubeVirt defaults to: CPU sockets and guest memory
	// get four times their boot value as hotplug room.
	MaxHotplugRatio = 4
	// maxVCPUs bounds maxSockets x cores x threads.
	maxVCPUs = 512
	// hotplugBlock and minHotplugMemory are KubeVirt's memory-hotplug
	// alignment (2Mi) and minimum guest memory (1Gi).
	hotplugBlock     = 2 << 20
	minHotplugMemory = 1 << 30
)

// firmwareUUIDNamespace is the UUIDv5 namespace KubeVirt's VM controller
// derives a firmware UUID from (CalculateLegacyUUID).
var firmwareUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// FirmwareUUID is the firmware UUID KubeVirt's VM controller gives a VMI
// named name when its template has none: a SHA-1 (version 5) UUID of the
// name in KubeVirt's namespace.
func FirmwareUUID(name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte(name)).String())
}

// Apply sets KubeVirt's defaults on vmi in place, in KubeVirt's order.
//
// One difference from KubeVirt: a VMI created directly (not by a
// VirtualMachine) without spec.domain.firmware.uuid gets a random UUID from
// the API server; Apply derives it from the name as the VM controller does,
// so that repeated launches of one manifest keep one firmware identity.
func Apply(vmi *v1.VirtualMachineInstance) {
	spec := &vmi.Spec
	if spec.Architecture == "" {
		spec.Architecture = Architecture
	}
	if spec.Domain.Machine == nil {
		spec.Domain.Machine = &v1.Machine{}
	}
	if spec.Domain.Machine.Type == "" {
		spec.Domain.Machine.Type = MachineType
	}
	setResourceRequests(spec)
	setGuestMemory(spec)
	setCPUTopology(spec)
	setPullPolicies(spec)
	if spec.EvictionStrategy == nil {
		none := v1.EvictionStrategyNone
		spec.EvictionStrategy = &none
	}
	setNetwork(spec)
	setVolumeDisks(spec)

	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &v1.Firmware{}
	}
	if spec.Domain.Firmware.UUID == "" {
		spec.Domain.Firmware.UUID = FirmwareUUID(vmi.Name)
	}
	// kubevirt.io/api's own defaulting: features (ACPI on), disk device
	// (a disk when none), CD-ROM read-only, timers and feature states
	// enabled when present, inputs, probes.
	v1.SetObjectDefaults_VirtualMachineInstance(vmi)
	setHypervDependencies(spec)
	setAmd64(spec)
	if spec.Domain.CPU.Model == "" {
		spec.Domain.CPU.Model = v1.DefaultCPUModel
	}
	setCPUHotplug(spec)
	setMemoryHotplug(spec)
}

func setResourceRequests(spec *v1.VirtualMachineInstanceSpec) {
	r := &spec.Domain.Resources
	for _, name := range []k8sv1.ResourceName{k8sv1.ResourceCPU, k8sv1.ResourceMemory} {
		limit, hasLimit := r.Limits[name]
		req := r.Requests[name]
		if hasLimit && !limit.IsZero() && req.IsZero() {
			if r.Requests == nil {
				r.Requests = k8sv1.ResourceList{}
			}
			r.Requests[name] = limit
		}
	}
	if _, ok := r.Requests[k8sv1.ResourceMemory]; ok {
		return
	}
	var mem *resource.Quantity
	if m := spec.Domain.Memory; m != nil && m.Guest != nil {
		mem = m.Guest
	} else if m != nil && m.Hugepages != nil {
		if q, err := resource.ParseQuantity(m.Hugepages.PageSize); err == nil {
			mem = &q
		}
	}
	if mem != nil && mem.Value() > 0 {
		if r.Requests == nil {
			r.Requests = k8sv1.ResourceList{}
		}
		// Memory overcommit is 100% by default: the request is the
		// guest memory. The default CPU request (100m) is not written.
		r.Requests[k8sv1.ResourceMemory] = *mem
	}
}

func setGuestMemory(spec *v1.VirtualMachineInstanceSpec) {
	d := &spec.Domain
	if d.Memory != nil && d.Memory.Guest != nil {
		return
	}
	if d.Memory == nil {
		d.Memory = &v1.Memory{}
	}
	switch {
	case !d.Resources.Requests.Memory().IsZero():
		d.Memory.Guest = d.Resources.Requests.Memory()
	case !d.Resources.Limits.Memory().IsZero():
		d.Memory.Guest = d.Resources.Limits.Memory()
	case d.Memory.Hugepages != nil:
		if q, err := resource.ParseQuantity(d.Memory.Hugepages.PageSize); err == nil {
			d.Memory.Guest = &q
		}
	}
}

// setCPUTopology puts the CPU count of the limits (else requests), rounded
// up, into sockets when no topology is given.
func setCPUTopology(spec *v1.VirtualMachineInstanceSpec) {
	cpu := spec.Domain.CPU
	if cpu != nil && (cpu.Cores != 0 || cpu.Sockets != 0 || cpu.Threads != 0) {
		return
	}
	if cpu == nil {
		cpu = &v1.CPU{}
		spec.Domain.CPU = cpu
	}
	sockets := uint32(1)
	r := spec.Domain.Resources
	if q, ok := r.Limits[k8sv1.ResourceCPU]; ok {
		sockets = uint32(q.Value())
	} else if q, ok := r.Requests[k8sv1.ResourceCPU]; ok {
		sockets = uint32(q.Value())
	}
	cpu.Sockets, cpu.Cores, cpu.Threads = sockets, 1, 1
}

// setPullPolicies gives container disks Kubernetes' pull policy default:
// Always for :latest or an untagged image, else IfNotPresent.
func setPullPolicies(spec *v1.VirtualMachineInstanceSpec) {
	for _, v := range spec.Volumes {
		cd := v.ContainerDisk
		if cd == nil || cd.ImagePullPolicy != "" {
			continue
		}
		if strings.HasSuffix(cd.Image, ":latest") || !strings.ContainsAny(cd.Image, ":@") {
			cd.ImagePullPolicy = k8sv1.PullAlways
		} else {
			cd.ImagePullPolicy = k8sv1.PullIfNotPresent
		}
	}
}

// setNetwork adds the pod network with a bridge interface named "default"
// (KubeVirt's default interface type, allowed on the pod network by
// default) when the VMI names no network and no interface, unless
// autoattachPodInterface is false.
func setNetwork(spec *v1.VirtualMachineInstanceSpec) {
	if a := spec.Domain.Devices.AutoattachPodInterface; a != nil && !*a {
		return
	}
	if len(spec.Networks) != 0 || len(spec.Domain.Devices.Interfaces) != 0 {
		return
	}
	spec.Domain.Devices.Interfaces = []v1.Interface{*v1.DefaultBridgeNetworkInterface()}
	spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
}

// setVolumeDisks adds a disk for every volume that no disk or filesystem
// names.
func setVolumeDisks(spec *v1.VirtualMachineInstanceSpec) {
	named := map[string]bool{}
	for _, d := range spec.Domain.Devices.Disks {
		named[d.Name] = true
	}
	for _, f := range spec.Domain.Devices.Filesystems {
		named[f.Name] = true
	}
	for _, v := range spec.Volumes {
		if !named[v.Name] {
			spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, v1.Disk{Name: v.Name})
		}
	}
}

// setHypervDependencies enables the Hyper-V enlightenments that an enabled
// one needs, where the VMI leaves them unset (leaves first, as KubeVirt
// does), and requires the vmx CPU feature for evmcs. A dependency the VMI
// disables explicitly is left for validation to refuse.
func setHypervDependencies(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.Features == nil || spec.Domain.Features.Hyperv == nil {
		return
	}
	h := spec.Domain.Features.Hyperv
	var synicTimer *v1.FeatureState
	if h.SyNICTimer != nil {
		synicTimer = &v1.FeatureState{Enabled: h.SyNICTimer.Enabled}
	}
	for _, dep := range []struct{ feature, requires **v1.FeatureState }{
		{&h.EVMCS, &h.VAPIC},
		{&h.IPI, &h.VPIndex},
		{&h.TLBFlush, &h.VPIndex},
		{&synicTimer, &h.SyNIC},
		{&h.SyNIC, &h.VPIndex},
	} {
		if enabled(*dep.feature) && (*dep.requires == nil || (*dep.requires).Enabled == nil) {
			if *dep.requires == nil {
				*dep.requires = &v1.FeatureState{}
			}
			t := true
			(*dep.requires).Enabled = &t
		}
	}
	if h.EVMCS != nil && (h.EVMCS.Enabled == nil || *h.EVMCS.Enabled) {
		requireCPUFeature(spec, "vmx")
	}
}

func enabled(f *v1.FeatureState) bool { return f != nil && f.Enabled != nil && *f.Enabled }

func requireCPUFeature(spec *v1.VirtualMachineInstanceSpec, name string) {
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &v1.CPU{}
	}
	for i, f := range spec.Domain.CPU.Features {
		if f.Name == name {
			spec.Domain.CPU.Features[i].Policy = "require"
			return
		}
	}
	spec.Domain.CPU.Features = append(spec.Domain.CPU.Features, v1.CPUFeature{Name: name, Policy: "require"})
}

// setAmd64 sets the amd64 disk bus and the watchdog's model and action.
func setAmd64(spec *v1.VirtualMachineInstanceSpec) {
	for i := range spec.Domain.Devices.Disks {
		d := &spec.Domain.Devices.Disks[i].DiskDevice
		if d.Disk != nil && d.Disk.Bus == "" {
			d.Disk.Bus = DiskBus
		}
		if d.CDRom != nil && d.CDRom.Bus == "" {
			d.CDRom.Bus = DiskBus
		}
		if d.LUN != nil && d.LUN.Bus == "" {
			d.LUN.Bus = DiskBus
		}
	}
	if w := spec.Domain.Devices.Watchdog; w != nil {
		if w.I6300ESB == nil {
			w.I6300ESB = &v1.I6300ESBWatchdog{}
		}
		if w.I6300ESB.Action == "" {
			w.I6300ESB.Action = v1.WatchdogActionReset
		}
	}
}

// setCPUHotplug gives CPU hotplug room: maxSockets = sockets x 4, bounded
// so that maxSockets x cores x threads stays within 512 vCPUs.
func setCPUHotplug(spec *v1.VirtualMachineInstanceSpec) {
	cpu := spec.Domain.CPU
	if cpu.MaxSockets != 0 {
		return
	}
	cpu.MaxSockets = cpu.Sockets * MaxHotplugRatio
	if per := cpu.Cores * cpu.Threads; per > 0 && cpu.MaxSockets*per > maxVCPUs {
		cpu.MaxSockets = max(maxVCPUs/per, cpu.Sockets)
	}
}

// setMemoryHotplug gives memory hotplug room, maxGuest = guest x 4, when
// KubeVirt would: guest memory of at least 1Gi in 2Mi blocks, no realtime,
// no NUMA passthrough, no launch security, 1Gi blocks with 1Gi hugepages.
func setMemoryHotplug(spec *v1.VirtualMachineInstanceSpec) {
	d := &spec.Domain
	if d.Memory == nil || d.Memory.MaxGuest != nil || d.Memory.Guest == nil {
		return
	}
	if d.CPU != nil && (d.CPU.Realtime != nil || (d.CPU.NUMA != nil && d.CPU.NUMA.GuestMappingPassthrough != nil)) {
		return
	}
	if d.LaunchSecurity != nil || spec.Architecture != "amd64" {
		return
	}
	block := int64(hotplugBlock)
	if d.Memory.Hugepages != nil && d.Memory.Hugepages.PageSize == "1Gi" {
		block = 1 << 30
	}
	guest := d.Memory.Guest.Value()
	maxGuest := guest * MaxHotplugRatio
	if guest < minHotplugMemory || guest%block != 0 || maxGuest%block != 0 {
		return
	}
	d.Memory.MaxGuest = resource.NewQuantity(maxGuest, resource.BinarySI)
}
