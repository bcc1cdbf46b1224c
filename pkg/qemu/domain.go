package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/cloudinit"
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
	// It also receives the per-VMI UEFI variable store, empty disks, the
	// cloud-init ISOs and the VNC socket.
	ScratchDir string
	// ClaimDir holds the persistentVolumeClaim and dataVolume volumes in
	// KubeVirt's file-system PVC layout: claim NAME is ClaimDir/NAME/disk.img.
	// Empty refuses such volumes.
	ClaimDir string
	// OVMF are the UEFI firmware files; zero means DebianOVMF().
	OVMF OVMF
	// HostPort picks the loopback port a forwarded guest port is reached
	// on; nil picks a free one.
	HostPort func(protocol string, guestPort int) (int, error)
}

// PortForward is a guest port reachable from the host through QEMU's
// user-mode network: HostAddress:HostPort on the host goes to GuestPort
// in the guest.
type PortForward struct {
	// Interface is the VMI interface name, Name the port's name (may be
	// empty).
	Interface, Name string
	// Protocol is TCP or UDP.
	Protocol    string
	GuestPort   int
	HostAddress string
	HostPort    int
}

// Conversion is a VMI turned into a domain, with what the launcher should
// tell the user about it.
type Conversion struct {
	Domain *libvirtxml.Domain
	// Notes are one-line messages about fields honoured only in part, such
	// as features TCG cannot emulate; the launcher logs each once.
	Notes []string
	// Ports are the forwarded guest ports, for the Running event.
	Ports []PortForward
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

// BuildDomain converts a VMI into a libvirt domain; it is Convert without
// the notes and ports.
func BuildDomain(vmi *v1.VirtualMachineInstance, opts DomainOptions) (*libvirtxml.Domain, error) {
	c, err := Convert(context.Background(), vmi, opts)
	if err != nil {
		return nil, err
	}
	return c.Domain, nil
}

// Convert converts a VMI (with KubeVirt's defaults applied, see
// pkg/kvdefaults) into a libvirt domain. Every field it reads is honoured
// or refused with a *SpecError naming it; CheckSupported refuses the fields
// it does not read at all. Files it makes (overlays, empty disks, cloud-init
// ISOs, the UEFI variable store) go into opts.ScratchDir.
func Convert(ctx context.Context, vmi *v1.VirtualMachineInstance, opts DomainOptions) (*Conversion, error) {
	conv := &Conversion{}
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
	ports, err := setInterfaces(dom, spec, opts.HostPort)
	if err != nil {
		return nil, err
	}
	conv.Ports = ports
	setFeatures(dom, spec.Domain.Features, opts.Accel, &conv.Notes)
	if err := setFirmware(dom, vmi, &opts); err != nil {
		return nil, err
	}
	if err := setClock(dom, spec.Domain.Clock, opts.Accel, &conv.Notes); err != nil {
		return nil, err
	}
	if err := setKernelBoot(dom, spec.Domain.Firmware, opts.Images); err != nil {
		return nil, err
	}
	if err := setDisks(ctx, dom, vmi, &opts); err != nil {
		return nil, err
	}
	if err := setDevicesExtra(dom, &spec.Domain.Devices, opts.ScratchDir); err != nil {
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
		{"spec.domain.devices.autoattachMemBalloon", spec.Domain.Devices.AutoattachMemBalloon},
	} {
		if f.value != nil && *f.value {
			return nil, &SpecError{Field: f.field, Msg: "true is not supported: the launcher attaches no memory balloon (set it to false or leave it out)"}
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
	conv.Domain = dom
	return conv, nil
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

func setDisks(ctx context.Context, dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, opts *DomainOptions) error {
	volumes := map[string]*v1.Volume{}
	index := map[string]int{}
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if _, dup := volumes[v.Name]; dup {
			return &SpecError{Field: fmt.Sprintf("spec.volumes[%d].name", i), Msg: fmt.Sprintf("duplicate volume name %q", v.Name)}
		}
		volumes[v.Name], index[v.Name] = v, i
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
		device, bus, busField, readonly := "disk", v1.DiskBusVirtio, field+".disk.bus", false
		switch {
		case d.LUN != nil:
			return &SpecError{Field: field + ".lun", Msg: "is not supported (SCSI pass-through needs a block device): use disk"}
		case d.CDRom != nil:
			device, busField, readonly = "cdrom", field+".cdrom.bus", enabledOr(d.CDRom.ReadOnly, true)
			bus = v1.DiskBusSATA
			if d.CDRom.Bus != "" {
				bus = d.CDRom.Bus
			}
		case d.Disk != nil:
			if d.Disk.Bus != "" {
				bus = d.Disk.Bus
			}
			readonly = d.Disk.ReadOnly
		}
		prefix := ""
		switch {
		case bus == v1.DiskBusVirtio && device == "disk":
			prefix = "vd"
		case bus == v1.DiskBusSATA:
			prefix = "sd"
		default:
			allowed := "virtio, sata"
			if device == "cdrom" {
				allowed = "sata"
			}
			return &SpecError{Field: busField, Msg: fmt.Sprintf("%q is not supported (allowed: %s)", bus, allowed)}
		}
		src, err := diskSource(ctx, vmi, v, fmt.Sprintf("spec.volumes[%d]", index[v.Name]), opts)
		if err != nil {
			return err
		}
		path, format := src.path, src.format
		if format == "" {
			if format, err = imageFormat(path); err != nil {
				return &SpecError{Field: field, Msg: err.Error()}
			}
		}
		readonly = readonly || src.readonly
		if src.ephemeral && opts.ScratchDir != "" && !readonly {
			// A container disk is ephemeral in KubeVirt: writes go to an
			// overlay that is thrown away, never into the image itself.
			overlay, err := createOverlay(path, format, opts.ScratchDir, d.Name)
			if err != nil {
				return &SpecError{Field: field, Msg: err.Error()}
			}
			path, format = overlay, "qcow2"
		} else if src.ephemeral {
			readonly = true
		}
		disk := libvirtxml.DomainDisk{
			Device: device,
			Alias:  &libvirtxml.DomainAlias{Name: "ua-" + d.Name},
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}},
			Target: &libvirtxml.DomainDiskTarget{Dev: prefix + string(rune('a'+next[prefix])), Bus: string(bus)},
			Serial: d.Serial,
		}
		if d.BootOrder != nil {
			disk.Boot = &libvirtxml.DomainDeviceBoot{Order: *d.BootOrder}
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

// source is where a volume's disk comes from.
type source struct {
	path string
	// format is "" when imageFormat should tell.
	format string
	// ephemeral: writes go to a throw-away overlay.
	ephemeral bool
	readonly  bool
}

func diskSource(ctx context.Context, vmi *v1.VirtualMachineInstance, v *v1.Volume, field string, opts *DomainOptions) (source, error) {
	switch {
	case v.HostDisk != nil:
		hd := v.HostDisk
		if hd.Path == "" {
			return source{}, &SpecError{Field: field + ".hostDisk.path", Msg: "must be set"}
		}
		switch hd.Type {
		case v1.HostDiskExists:
			if _, err := os.Stat(hd.Path); err != nil {
				return source{}, &SpecError{Field: field + ".hostDisk.path", Msg: fmt.Sprintf("type Disk needs an existing file: %v", err)}
			}
		case v1.HostDiskExistsOrCreate:
			if err := createSparse(hd.Path, hd.Capacity.Value()); err != nil {
				return source{}, &SpecError{Field: field + ".hostDisk", Msg: err.Error()}
			}
		default:
			return source{}, &SpecError{Field: field + ".hostDisk.type", Msg: fmt.Sprintf("%q is not allowed (allowed: Disk, DiskOrCreate)", hd.Type)}
		}
		return source{path: hd.Path}, nil
	case v.ContainerDisk != nil:
		if opts.Images == nil {
			return source{}, &SpecError{Field: field + ".containerDisk.image", Msg: "no image folder to resolve it (pass --image-dir)"}
		}
		p, err := opts.Images.Disk(v.ContainerDisk.Image, v.ContainerDisk.Path)
		if err != nil {
			return source{}, &SpecError{Field: field + ".containerDisk", Msg: err.Error()}
		}
		return source{path: p, ephemeral: true}, nil
	case v.PersistentVolumeClaim != nil:
		p, err := claimFile(opts.ClaimDir, v.PersistentVolumeClaim.ClaimName, field+".persistentVolumeClaim.claimName")
		return source{path: p, readonly: v.PersistentVolumeClaim.ReadOnly}, err
	case v.DataVolume != nil:
		p, err := claimFile(opts.ClaimDir, v.DataVolume.Name, field+".dataVolume.name")
		return source{path: p}, err
	case v.Ephemeral != nil:
		if v.Ephemeral.PersistentVolumeClaim == nil {
			return source{}, &SpecError{Field: field + ".ephemeral.persistentVolumeClaim", Msg: "must be set"}
		}
		p, err := claimFile(opts.ClaimDir, v.Ephemeral.PersistentVolumeClaim.ClaimName, field+".ephemeral.persistentVolumeClaim.claimName")
		return source{path: p, ephemeral: true}, err
	case v.EmptyDisk != nil:
		size := v.EmptyDisk.Capacity.Value()
		if size <= 0 {
			return source{}, &SpecError{Field: field + ".emptyDisk.capacity", Msg: "must be a positive size (for example 1Gi)"}
		}
		if opts.ScratchDir == "" {
			return source{}, &SpecError{Field: field + ".emptyDisk", Msg: "an empty disk needs a per-VMI folder (no scratch folder given)"}
		}
		p, err := createEmptyDisk(ctx, opts.ScratchDir, v.Name, size)
		if err != nil {
			return source{}, &SpecError{Field: field + ".emptyDisk", Msg: err.Error()}
		}
		return source{path: p, format: "qcow2"}, nil
	case cloudinit.IsVolume(v):
		data, err := cloudinit.FromVolume(vmi, v, field)
		if err != nil {
			var fe *cloudinit.FieldError
			if errors.As(err, &fe) {
				return source{}, &SpecError{Field: fe.Field, Msg: fe.Msg}
			}
			return source{}, err
		}
		if opts.ScratchDir == "" {
			return source{}, &SpecError{Field: field, Msg: "a cloud-init disk needs a per-VMI folder (no scratch folder given)"}
		}
		if err := os.MkdirAll(opts.ScratchDir, 0o700); err != nil {
			return source{}, &SpecError{Field: field, Msg: err.Error()}
		}
		p := filepath.Join(opts.ScratchDir, "cloudinit-"+v.Name+".iso")
		if err := data.WriteISO(ctx, p); err != nil {
			return source{}, &SpecError{Field: field, Msg: err.Error()}
		}
		return source{path: p, format: "raw", readonly: true}, nil
	}
	return source{}, &SpecError{Field: field, Msg: "unsupported volume source (supported: hostDisk, containerDisk, persistentVolumeClaim, dataVolume, ephemeral, emptyDisk, cloudInitNoCloud, cloudInitConfigDrive)"}
}

// claimFile is a claim's disk image in KubeVirt's file-system PVC layout.
func claimFile(dir, name, field string) (string, error) {
	if name == "" {
		return "", &SpecError{Field: field, Msg: "must be set"}
	}
	if dir == "" {
		return "", &SpecError{Field: field, Msg: fmt.Sprintf("claim %q needs a claim folder (pass --claim-dir DIR; the claim is DIR/%s/disk.img)", name, name)}
	}
	if strings.Contains(name, "/") || name == "." || name == ".." {
		return "", &SpecError{Field: field, Msg: fmt.Sprintf("%q is not a claim name", name)}
	}
	p := filepath.Join(dir, name, "disk.img")
	if _, err := os.Stat(p); err != nil {
		return "", &SpecError{Field: field, Msg: fmt.Sprintf("claim %q has no disk image: %v", name, err)}
	}
	return p, nil
}

// createEmptyDisk makes a sparse qcow2 of size bytes with qemu-img.
func createEmptyDisk(ctx context.Context, dir, name string, size int64) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating empty-disk folder: %w", err)
	}
	p := filepath.Join(dir, "emptydisk-"+name+".qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", p, strconv.FormatInt(size, 10)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("creating empty disk %s with qemu-img: %v: %s", p, err, strings.TrimSpace(string(out)))
	}
	return p, nil
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
// adds a bridge one named "default") on a network with a pod source
// becomes a NIC on QEMU's user-mode network, which like a pod network gives
// the guest a private address with outbound NAT. An interface with ports
// gets each forwarded from a loopback port on the host (QEMU hostfwd); as
// libvirt 9.0 has no XML for that with the user-mode back end, such an
// interface goes onto QEMU's command line.
func setInterfaces(dom *libvirtxml.Domain, spec *v1.VirtualMachineInstanceSpec, hostPort func(string, int) (int, error)) ([]PortForward, error) {
	if hostPort == nil {
		hostPort = freeLoopbackPort
	}
	networks := map[string]v1.Network{}
	for _, n := range spec.Networks {
		networks[n.Name] = n
	}
	used := map[string]bool{}
	var forwards []PortForward
	cmdlineNICs := 0
	for i, iface := range spec.Domain.Devices.Interfaces {
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		n, ok := networks[iface.Name]
		if !ok {
			return nil, &SpecError{Field: field + ".name", Msg: fmt.Sprintf("no network named %q in spec.networks", iface.Name)}
		}
		if n.Pod == nil {
			kind := "multus"
			if n.Multus == nil {
				kind = "this network type"
			}
			return nil, &SpecError{Field: fmt.Sprintf("spec.networks[name=%s]", n.Name), Msg: kind + " is not supported: only the pod network is (one machine has no other networks)"}
		}
		b := iface.InterfaceBindingMethod
		switch {
		case b.SRIOV != nil:
			return nil, &SpecError{Field: field + ".sriov", Msg: "is not supported: only the bridge and masquerade bindings are"}
		case b.DeprecatedSlirp != nil, b.DeprecatedPasst != nil, b.DeprecatedMacvtap != nil:
			return nil, &SpecError{Field: field, Msg: "this deprecated binding is not supported: only the bridge and masquerade bindings are"}
		case iface.Binding != nil:
			return nil, &SpecError{Field: field + ".binding", Msg: "network binding plugins are not supported: only the bridge and masquerade bindings are"}
		}
		model := iface.Model
		if model == "" {
			model = "virtio"
		}
		qemuModel, ok := map[string]string{"virtio": "virtio-net-pci", "e1000": "e1000", "e1000e": "e1000e", "rtl8139": "rtl8139"}[model]
		if !ok {
			return nil, &SpecError{Field: field + ".model", Msg: fmt.Sprintf("%q is not supported (allowed: virtio, e1000, e1000e, rtl8139)", model)}
		}
		used[n.Name] = true
		if len(iface.Ports) == 0 {
			nic := libvirtxml.DomainInterface{
				Source: &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}},
				Model:  &libvirtxml.DomainInterfaceModel{Type: model},
			}
			if iface.MacAddress != "" {
				nic.MAC = &libvirtxml.DomainInterfaceMAC{Address: iface.MacAddress}
			}
			dom.Devices.Interfaces = append(dom.Devices.Interfaces, nic)
			continue
		}
		netdev := "user,id=ua-" + iface.Name
		for j, p := range iface.Ports {
			pf := fmt.Sprintf("%s.ports[%d]", field, j)
			proto := strings.ToUpper(p.Protocol)
			if proto == "" {
				proto = "TCP"
			}
			if proto != "TCP" && proto != "UDP" {
				return nil, &SpecError{Field: pf + ".protocol", Msg: fmt.Sprintf("%q is not supported (allowed: TCP, UDP)", p.Protocol)}
			}
			if p.Port < 1 || p.Port > 65535 {
				return nil, &SpecError{Field: pf + ".port", Msg: fmt.Sprintf("%d is not a port (1-65535)", p.Port)}
			}
			hp, err := hostPort(proto, int(p.Port))
			if err != nil {
				return nil, &SpecError{Field: pf, Msg: fmt.Sprintf("choosing a host port: %v", err)}
			}
			forwards = append(forwards, PortForward{Interface: iface.Name, Name: p.Name, Protocol: proto, GuestPort: int(p.Port), HostAddress: "127.0.0.1", HostPort: hp})
			netdev += fmt.Sprintf(",hostfwd=%s:127.0.0.1:%d-:%d", strings.ToLower(proto), hp, p.Port)
		}
		// libvirt does not know this device, so it must not pick its PCI
		// slot: slots from 0x1a down on the root bus are ones libvirt
		// fills last (it counts up from slot 1) and q35 leaves free when
		// there is no USB or sound controller.
		bus := "pci.0"
		if strings.Contains(dom.OS.Type.Machine, "q35") {
			bus = "pcie.0"
		}
		device := fmt.Sprintf("%s,netdev=ua-%s,bus=%s,addr=%#x", qemuModel, iface.Name, bus, 0x1a-cmdlineNICs)
		cmdlineNICs++
		if iface.MacAddress != "" {
			device += ",mac=" + iface.MacAddress
		}
		if dom.QEMUCommandline == nil {
			dom.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{}
		}
		dom.QEMUCommandline.Args = append(dom.QEMUCommandline.Args,
			libvirtxml.DomainQEMUCommandlineArg{Value: "-netdev"}, libvirtxml.DomainQEMUCommandlineArg{Value: netdev},
			libvirtxml.DomainQEMUCommandlineArg{Value: "-device"}, libvirtxml.DomainQEMUCommandlineArg{Value: device})
	}
	for _, n := range spec.Networks {
		if !used[n.Name] {
			return nil, &SpecError{Field: fmt.Sprintf("spec.networks[name=%s]", n.Name), Msg: "no interface in spec.domain.devices.interfaces uses this network"}
		}
	}
	return forwards, nil
}

// freeLoopbackPort asks the kernel for a free loopback port of protocol.
// QEMU binds it moments later; another process taking it in between makes
// the start fail, not misroute.
func freeLoopbackPort(protocol string, _ int) (int, error) {
	if protocol == "UDP" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
