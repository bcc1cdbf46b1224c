package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// DomainOptions are the host-side choices that a VMI does not carry.
type DomainOptions struct {
	// Accel selects the domain type: kvm or qemu (TCG).
	Accel Accel
	// Images resolves containerDisk and kernelBoot container images.
	Images *ImageStore
	// ConsoleLog is the file the serial console is written to. Empty means
	// no serial console is attached.
	ConsoleLog string
	// ScratchDir receives the copy-on-write overlays of container disks,
	// which are ephemeral as in KubeVirt; it is removed with the launch.
	// Empty attaches container disks read-only.
	ScratchDir string
}

// SpecError is a VMI field the launcher cannot turn into a domain.
type SpecError struct {
	Field string
	Msg   string
}

func (e *SpecError) Error() string { return fmt.Sprintf("field %s: %s", e.Field, e.Msg) }

// DomainName is the libvirt name of a VMI's domain: namespace_name, as
// KubeVirt names it.
func DomainName(vmi *v1.VirtualMachineInstance) string {
	return vmi.Namespace + "_" + vmi.Name
}

// BuildDomain converts a VMI into a libvirt domain. Every field it reads is
// honoured or refused with a *SpecError naming it; CheckSupported refuses
// the fields it does not read at all.
func BuildDomain(vmi *v1.VirtualMachineInstance, opts DomainOptions) (*libvirtxml.Domain, error) {
	spec := &vmi.Spec
	dom := &libvirtxml.Domain{
		Type:       opts.Accel.DomainType(),
		Name:       DomainName(vmi),
		OnPoweroff: "destroy",
		OnCrash:    "destroy",
		Features:   &libvirtxml.DomainFeatureList{},
		Devices: &libvirtxml.DomainDeviceList{
			// No USB, no balloon, no graphics: a small VM boots faster and
			// every device present is one the VMI asked for or implies.
			Controllers: []libvirtxml.DomainController{{Type: "usb", Model: "none"}},
			MemBalloon:  &libvirtxml.DomainMemBalloon{Model: "none"},
		},
	}
	if uuid := vmiUUID(vmi); uuid != "" {
		dom.UUID = uuid
	}

	if a := spec.Architecture; a != "" && a != "amd64" {
		return nil, &SpecError{Field: "spec.architecture", Msg: fmt.Sprintf("%q is not supported (allowed: amd64, the host's)", a)}
	}
	if err := setCPU(dom, spec.Domain.CPU, opts.Accel); err != nil {
		return nil, err
	}
	if err := setInterfaces(dom, spec); err != nil {
		return nil, err
	}
	if err := setMemory(dom, &spec.Domain); err != nil {
		return nil, err
	}
	machine := "pc"
	if spec.Domain.Machine != nil && spec.Domain.Machine.Type != "" {
		machine = spec.Domain.Machine.Type
		if !(machine == "pc" || machine == "q35" || strings.HasPrefix(machine, "pc-i440fx-") || strings.HasPrefix(machine, "pc-q35-")) {
			return nil, &SpecError{Field: "spec.domain.machine.type", Msg: fmt.Sprintf("%q is not supported (allowed: pc, q35, pc-i440fx-*, pc-q35-*)", machine)}
		}
	}
	dom.OS = &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: machine}}
	// ACPI is on unless the VMI turns it off: without it a guest power-off
	// only halts and the domain stays running.
	if f := spec.Domain.Features; f == nil || f.ACPI.Enabled == nil || *f.ACPI.Enabled {
		dom.Features.ACPI = &libvirtxml.DomainFeature{}
	}
	if err := setKernelBoot(dom, spec.Domain.Firmware, opts.Images); err != nil {
		return nil, err
	}
	if err := setDisks(dom, vmi, opts.Images, opts.ScratchDir); err != nil {
		return nil, err
	}
	if dom.OS.Kernel == "" && len(dom.Devices.Disks) == 0 {
		return nil, &SpecError{Field: "spec.domain.firmware.kernelBoot", Msg: "the VMI has nothing to boot: set spec.domain.firmware.kernelBoot.container or add a disk backed by a hostDisk or containerDisk volume"}
	}
	if dom.OS.Kernel == "" {
		dom.OS.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	}
	for _, f := range []struct {
		field string
		value *bool
	}{
		{"spec.domain.devices.autoattachGraphicsDevice", spec.Domain.Devices.AutoattachGraphicsDevice},
		{"spec.domain.devices.autoattachMemBalloon", spec.Domain.Devices.AutoattachMemBalloon},
		{"spec.domain.devices.autoattachPodInterface", spec.Domain.Devices.AutoattachPodInterface},
	} {
		if f.value != nil && *f.value {
			return nil, &SpecError{Field: f.field, Msg: "true is not supported: the launcher attaches no graphics, balloon or network device (set it to false or leave it out)"}
		}
	}
	if a := spec.Domain.Devices.AutoattachSerialConsole; a != nil && !*a {
		opts.ConsoleLog = ""
	}
	if opts.ConsoleLog != "" {
		port := uint(0)
		dom.Devices.Serials = []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: opts.ConsoleLog}},
			Target: &libvirtxml.DomainSerialTarget{Port: &port},
		}}
		dom.Devices.Consoles = []libvirtxml.DomainConsole{{Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port}}}
	}
	// The ISA pvpanic device lets a guest kernel panic reach libvirt as a
	// crash (with on_crash=destroy the domain ends with reason "crashed").
	dom.Devices.Panics = []libvirtxml.DomainPanic{{
		Model:   "isa",
		Address: &libvirtxml.DomainAddress{ISA: &libvirtxml.DomainAddressISA{IOBase: ptr(uint(0x505))}},
	}}
	return dom, nil
}

func ptr[T any](v T) *T { return &v }

// vmiUUID is the domain UUID: firmware.uuid when set, else the VMI UID when
// it is a UUID; libvirt generates one otherwise.
func vmiUUID(vmi *v1.VirtualMachineInstance) string {
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.UUID != "" {
		return string(fw.UUID)
	}
	uid := string(vmi.UID)
	if len(uid) == 36 && strings.Count(uid, "-") == 4 {
		return uid
	}
	return ""
}

func setCPU(dom *libvirtxml.Domain, cpu *v1.CPU, accel Accel) error {
	sockets, cores, threads := uint32(1), uint32(1), uint32(1)
	if cpu != nil {
		if cpu.Sockets > 0 {
			sockets = cpu.Sockets
		}
		if cpu.Cores > 0 {
			cores = cpu.Cores
		}
		if cpu.Threads > 0 {
			threads = cpu.Threads
		}
	}
	if cpu != nil {
		switch cpu.Model {
		case "", v1.CPUModeHostModel:
			// KubeVirt's default. Under KVM the launcher always uses
			// host-model; TCG does not emulate the host's CPU, so QEMU's
			// default model stands in for it.
		default:
			return &SpecError{Field: "spec.domain.cpu.model", Msg: fmt.Sprintf("%q is not supported (allowed: host-model, KubeVirt's default)", cpu.Model)}
		}
		if cpu.MaxSockets != 0 && cpu.MaxSockets < sockets {
			return &SpecError{Field: "spec.domain.cpu.maxSockets", Msg: fmt.Sprintf("%d is below spec.domain.cpu.sockets %d", cpu.MaxSockets, sockets)}
		}
		// maxSockets only bounds CPU hotplug, which the launcher never does.
	}
	n := sockets * cores * threads
	if n > 64 {
		return &SpecError{Field: "spec.domain.cpu", Msg: fmt.Sprintf("sockets x cores x threads = %d vCPUs; at most 64 are supported", n)}
	}
	dom.VCPU = &libvirtxml.DomainVCPU{Value: uint(n)}
	dom.CPU = &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: int(sockets), Cores: int(cores), Threads: int(threads)}}
	if accel == AccelKVM {
		dom.CPU.Mode = "host-model"
	}
	return nil
}

func setMemory(dom *libvirtxml.Domain, d *v1.DomainSpec) error {
	var q *resource.Quantity
	field := ""
	if d.Memory != nil && d.Memory.Guest != nil {
		q, field = d.Memory.Guest, "spec.domain.memory.guest"
	} else if r, ok := d.Resources.Requests[k8sv1.ResourceMemory]; ok {
		q, field = &r, "spec.domain.resources.requests.memory"
	}
	if q == nil {
		return &SpecError{Field: "spec.domain.memory.guest", Msg: "no memory size: set spec.domain.memory.guest or spec.domain.resources.requests.memory (for example 256Mi)"}
	}
	bytes := q.Value()
	const minBytes, maxBytes = 16 << 20, 1 << 40
	if bytes < minBytes || bytes > maxBytes {
		return &SpecError{Field: field, Msg: fmt.Sprintf("%s is out of range (16Mi to 1Ti)", q.String())}
	}
	dom.Memory = &libvirtxml.DomainMemory{Value: uint(bytes >> 10), Unit: "KiB"}
	return nil
}

func setKernelBoot(dom *libvirtxml.Domain, fw *v1.Firmware, images *ImageStore) error {
	if fw == nil || fw.KernelBoot == nil {
		return nil
	}
	kb := fw.KernelBoot
	if kb.Container == nil {
		if kb.KernelArgs != "" {
			return &SpecError{Field: "spec.domain.firmware.kernelBoot.kernelArgs", Msg: "kernel arguments need a kernel: set spec.domain.firmware.kernelBoot.container"}
		}
		return nil
	}
	c := kb.Container
	if c.Image == "" {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container.image", Msg: "must be set"}
	}
	if c.KernelPath == "" {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container.kernelPath", Msg: "must be set (for the test guest: /boot/vmlinuz)"}
	}
	if images == nil {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container.image", Msg: "no image folder to resolve it (pass --image-dir)"}
	}
	kernel, err := images.File(c.Image, c.KernelPath)
	if err != nil {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container", Msg: err.Error()}
	}
	dom.OS.Kernel = kernel
	if c.InitrdPath != "" {
		initrd, err := images.File(c.Image, c.InitrdPath)
		if err != nil {
			return &SpecError{Field: "spec.domain.firmware.kernelBoot.container.initrdPath", Msg: err.Error()}
		}
		dom.OS.Initrd = initrd
	}
	dom.OS.Cmdline = kb.KernelArgs
	return nil
}

func setDisks(dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, images *ImageStore, scratch string) error {
	volumes := map[string]*v1.Volume{}
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if _, dup := volumes[v.Name]; dup {
			return &SpecError{Field: fmt.Sprintf("spec.volumes[%d].name", i), Msg: fmt.Sprintf("duplicate volume name %q", v.Name)}
		}
		volumes[v.Name] = v
	}
	used := map[string]bool{}
	next := map[string]int{}
	for i, d := range vmi.Spec.Domain.Devices.Disks {
		field := fmt.Sprintf("spec.domain.devices.disks[%d]", i)
		v, ok := volumes[d.Name]
		if !ok {
			return &SpecError{Field: field + ".name", Msg: fmt.Sprintf("no volume named %q in spec.volumes", d.Name)}
		}
		if used[d.Name] {
			return &SpecError{Field: field + ".name", Msg: fmt.Sprintf("volume %q is used by two disks", d.Name)}
		}
		used[d.Name] = true
		bus := v1.DiskBusVirtio
		readonly := false
		if d.Disk != nil {
			if d.Disk.Bus != "" {
				bus = d.Disk.Bus
			}
			readonly = d.Disk.ReadOnly
		}
		prefix := ""
		switch bus {
		case v1.DiskBusVirtio:
			prefix = "vd"
		case v1.DiskBusSATA:
			prefix = "sd"
		default:
			return &SpecError{Field: field + ".disk.bus", Msg: fmt.Sprintf("%q is not supported (allowed: virtio, sata)", bus)}
		}
		path, ephemeral, err := diskSource(v, images)
		if err != nil {
			return err
		}
		format, err := imageFormat(path)
		if err != nil {
			return &SpecError{Field: field, Msg: err.Error()}
		}
		if ephemeral && scratch != "" && !readonly {
			// A container disk is ephemeral in KubeVirt: writes go to an
			// overlay that is thrown away, never into the image itself.
			overlay, err := createOverlay(path, format, scratch, d.Name)
			if err != nil {
				return &SpecError{Field: field, Msg: err.Error()}
			}
			path, format = overlay, "qcow2"
		} else if ephemeral {
			readonly = true
		}
		disk := libvirtxml.DomainDisk{
			Device: "disk",
			Alias:  &libvirtxml.DomainAlias{Name: "ua-" + d.Name},
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}},
			Target: &libvirtxml.DomainDiskTarget{Dev: prefix + string(rune('a'+next[prefix])), Bus: string(bus)},
			Serial: d.Serial,
		}
		next[prefix]++
		if readonly {
			disk.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
		}
		dom.Devices.Disks = append(dom.Devices.Disks, disk)
	}
	for i, v := range vmi.Spec.Volumes {
		if !used[v.Name] {
			return &SpecError{Field: fmt.Sprintf("spec.volumes[%d]", i), Msg: fmt.Sprintf("volume %q is not used by any disk in spec.domain.devices.disks", v.Name)}
		}
	}
	return nil
}

func diskSource(v *v1.Volume, images *ImageStore) (path string, ephemeral bool, err error) {
	field := "spec.volumes[name=" + v.Name + "]"
	switch {
	case v.HostDisk != nil:
		hd := v.HostDisk
		if hd.Path == "" {
			return "", false, &SpecError{Field: field + ".hostDisk.path", Msg: "must be set"}
		}
		switch hd.Type {
		case v1.HostDiskExists:
			if _, err := os.Stat(hd.Path); err != nil {
				return "", false, &SpecError{Field: field + ".hostDisk.path", Msg: fmt.Sprintf("type Disk needs an existing file: %v", err)}
			}
		case v1.HostDiskExistsOrCreate:
			if err := createSparse(hd.Path, hd.Capacity.Value()); err != nil {
				return "", false, &SpecError{Field: field + ".hostDisk", Msg: err.Error()}
			}
		default:
			return "", false, &SpecError{Field: field + ".hostDisk.type", Msg: fmt.Sprintf("%q is not allowed (allowed: Disk, DiskOrCreate)", hd.Type)}
		}
		return hd.Path, false, nil
	case v.ContainerDisk != nil:
		if images == nil {
			return "", false, &SpecError{Field: field + ".containerDisk.image", Msg: "no image folder to resolve it (pass --image-dir)"}
		}
		p, err := images.Disk(v.ContainerDisk.Image, v.ContainerDisk.Path)
		if err != nil {
			return "", false, &SpecError{Field: field + ".containerDisk", Msg: err.Error()}
		}
		return p, true, nil
	}
	return "", false, &SpecError{Field: field, Msg: "unsupported volume source (supported: hostDisk, containerDisk)"}
}

func createSparse(path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if size <= 0 {
		return fmt.Errorf("type DiskOrCreate needs a capacity to create %s", path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating disk: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("sizing disk %s: %w", path, err)
	}
	return f.Close()
}

// imageFormat tells qcow2 from raw by the qcow2 magic.
func imageFormat(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening disk image: %w", err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if n, _ := f.Read(magic); n == 4 && string(magic) == "QFI\xfb" {
		return "qcow2", nil
	}
	return "raw", nil
}

// createOverlay makes a qcow2 overlay of image in dir with qemu-img.
func createOverlay(image, format, dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating overlay folder: %w", err)
	}
	overlay := filepath.Join(dir, "overlay-"+name+".qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", format, "-b", image, overlay).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("creating overlay of %s with qemu-img: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	return overlay, nil
}

// setInterfaces attaches the pod network, the only network a launcher has:
// an interface with the bridge or masquerade binding (KubeVirt's webhook
// adds one named "default") on a network with a pod source becomes a
// virtio NIC on QEMU's user-mode network, which like a pod network gives
// the guest a private address with outbound NAT.
func setInterfaces(dom *libvirtxml.Domain, spec *v1.VirtualMachineInstanceSpec) error {
	networks := map[string]v1.Network{}
	for _, n := range spec.Networks {
		networks[n.Name] = n
	}
	used := map[string]bool{}
	for i, iface := range spec.Domain.Devices.Interfaces {
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		n, ok := networks[iface.Name]
		if !ok {
			return &SpecError{Field: field + ".name", Msg: fmt.Sprintf("no network named %q in spec.networks", iface.Name)}
		}
		if n.Pod == nil {
			return &SpecError{Field: fmt.Sprintf("spec.networks[name=%s]", n.Name), Msg: "only the pod network is supported"}
		}
		b := iface.InterfaceBindingMethod
		if b.SRIOV != nil || b.DeprecatedSlirp != nil || b.DeprecatedPasst != nil || b.DeprecatedMacvtap != nil || iface.Binding != nil {
			return &SpecError{Field: field, Msg: "only the bridge and masquerade bindings are supported"}
		}
		used[n.Name] = true
		dom.Devices.Interfaces = append(dom.Devices.Interfaces, libvirtxml.DomainInterface{
			Source: &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}},
			Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		})
	}
	for _, n := range spec.Networks {
		if !used[n.Name] {
			return &SpecError{Field: fmt.Sprintf("spec.networks[name=%s]", n.Name), Msg: "no interface in spec.domain.devices.interfaces uses this network"}
		}
	}
	return nil
}
