package converter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/admission"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/overlay"
)

// DomainOptions are the host-side choices that a VMI does not carry.
type DomainOptions struct {
	// Accel selects the domain type: kvm or qemu (TCG).
	Accel Accel
	// Images resolves containerDisk and kernelBoot container images.
	Images *ImageStore
	// ContainerDiskDir is a KubeVirt launcher pod's container-disks folder
	// (/var/run/kubevirt/container-disks), where KubeVirt's virt-handler
	// bind-mounts containerDisk volume N as disk_N.img and the kernel-boot
	// files as kernel-boot/<base name>, as KubeVirt's launcher reads them
	// (pkg/container-disk's GetDiskTargetPathFromLauncherView and
	// GetKernelBootArtifactPathFromLauncherView). A file found there wins
	// over Images; see kubeVirtDiskFile for when Images is the fallback.
	ContainerDiskDir string
	// ConsoleLog is the file the serial console is written to. Empty means
	// no serial console is attached.
	ConsoleLog string
	// Overlays, when set, has the container disks' overlays started
	// (overlay.Start) and added here rather than made before Convert
	// returns: the caller waits for them before QEMU opens the disks, also
	// when Convert fails after starting some.
	Overlays *[]overlay.Pending
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
	// on; nil picks a free one (port 0, chosen at launch, in a dry run).
	HostPort func(protocol string, guestPort int) (int, error)
	// DryRun renders the domain without changing the host: no hostDisk
	// image or folder is created (files in ScratchDir, which the launcher
	// removes, and the image cache are still made).
	DryRun bool
	// DataVolumeTemplates are the VM's; a dataVolume volume naming one is
	// imported into ClaimDir first when its claim has no disk image yet.
	DataVolumeTemplates []v1.DataVolumeTemplateSpec
	// Tap, when set, plugs the pod network's interface into the tap
	// device KubeVirt's virt-handler made in the pod (--pod-network
	// kubevirt-tap) instead of QEMU's user-mode network.
	Tap *TapNIC
}

// Conversion is a VMI turned into a domain, with what the launcher should
// tell the user about it.
type Conversion struct {
	Domain *libvirtxml.Domain
	// Notes are one-line messages about fields honoured only in part, such
	// as features TCG cannot emulate; the launcher logs each once.
	Notes []string
	// Ports are the forwarded guest ports, for the Running event.
	Ports []launcherapi.PortForward
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
	if err := prepareOptions(&opts); err != nil {
		return nil, err
	}
	conv := &Conversion{}
	dom := newDomain(vmi, opts.Accel)
	if err := setMachine(dom, &vmi.Spec, opts.Accel, &conv.Notes); err != nil {
		return nil, err
	}
	ports, err := setInterfaces(dom, &vmi.Spec, opts.HostPort, opts.Tap)
	if err != nil {
		return nil, err
	}
	conv.Ports = ports
	if err := setBoot(ctx, dom, vmi, &opts, &conv.Notes); err != nil {
		return nil, err
	}
	setFixedDevices(dom, vmi, opts)
	conv.Domain = dom
	return conv, nil
}

// prepareOptions makes the claim folder absolute, creates the per-VMI
// folder and, for a dry run, stands in for the host-port choice.
func prepareOptions(opts *DomainOptions) error {
	if opts.ClaimDir != "" {
		// The domain is read by libvirt and QEMU, not from this
		// process's working directory.
		abs, err := filepath.Abs(opts.ClaimDir)
		if err != nil {
			return fmt.Errorf("claim folder %s: %w", opts.ClaimDir, err)
		}
		opts.ClaimDir = abs
	}
	if opts.ScratchDir != "" {
		// QEMU binds the display's and the guest agent's sockets there.
		if err := os.MkdirAll(opts.ScratchDir, 0o700); err != nil {
			return fmt.Errorf("creating the per-VMI folder: %w", err)
		}
	}
	if opts.DryRun && opts.HostPort == nil {
		opts.HostPort = func(string, int) (int, error) { return 0, nil }
	}
	return nil
}

// newDomain is the domain's frame: type, name, UUID, lifecycle actions and
// the USB controller turned off.
func newDomain(vmi *v1.VirtualMachineInstance, accel Accel) *libvirtxml.Domain {
	dom := &libvirtxml.Domain{
		Type:       accel.DomainType(),
		Name:       DomainName(vmi),
		OnPoweroff: "destroy",
		OnCrash:    "destroy",
		Features:   &libvirtxml.DomainFeatureList{},
		Devices: &libvirtxml.DomainDeviceList{
			// No USB controller: KubeVirt attaches none unless a device
			// needs one. The balloon and graphics follow the
			// autoattach fields (setBalloon, setDevicesExtra).
			// KubeVirt always adds a virtio-scsi controller (for hot-plug)
			// and a virtio-serial one for the guest agent's channel.
			Controllers: []libvirtxml.DomainController{{Type: "usb", Index: ptr(uint(0)), Model: "none"}},
		},
	}
	if uuid := vmiUUID(vmi); uuid != "" {
		dom.UUID = uuid
	}
	return dom
}

// setMachine checks the architecture and sets the CPU, the memory and the
// machine type (pc unless the VMI names another pc or q35 one).
func setMachine(dom *libvirtxml.Domain, spec *v1.VirtualMachineInstanceSpec, accel Accel, notes *[]string) error {
	if a := spec.Architecture; a != "" && a != "amd64" {
		return &SpecError{Field: "spec.architecture", Msg: fmt.Sprintf("%s is not supported (allowed: amd64, the host's)", launcherapi.Quote(a))}
	}
	if err := setCPU(dom, spec.Domain.CPU, accel); err != nil {
		return err
	}
	if err := setMemory(dom, &spec.Domain, notes); err != nil {
		return err
	}
	machine := "pc"
	if spec.Domain.Machine != nil && spec.Domain.Machine.Type != "" {
		machine = spec.Domain.Machine.Type
		if !(machine == "pc" || machine == "q35" || strings.HasPrefix(machine, "pc-i440fx-") || strings.HasPrefix(machine, "pc-q35-")) {
			return &SpecError{Field: "spec.domain.machine.type", Msg: fmt.Sprintf("%s is not supported (allowed: pc, q35, pc-i440fx-*, pc-q35-*)", launcherapi.Quote(machine))}
		}
	}
	dom.OS = &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: machine}}
	return nil
}

// setBoot sets features, firmware, clock, kernel boot, disks and the
// autoattached devices, and refuses a VMI with nothing to boot.
func setBoot(ctx context.Context, dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, opts *DomainOptions, notes *[]string) error {
	spec := &vmi.Spec
	setFeatures(dom, spec.Domain.Features, opts.Accel, notes)
	if err := setFirmware(dom, vmi, opts); err != nil {
		return err
	}
	if err := setClock(dom, spec.Domain.Clock, opts.Accel, notes); err != nil {
		return err
	}
	if err := setKernelBoot(dom, spec.Domain.Firmware, opts); err != nil {
		return err
	}
	if err := setDisks(ctx, dom, vmi, opts); err != nil {
		return err
	}
	if err := setDevicesExtra(dom, vmi, opts.ScratchDir); err != nil {
		return err
	}
	if dom.OS.Kernel == "" && len(dom.Devices.Disks) == 0 {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot", Msg: "the VMI has nothing to boot: set spec.domain.firmware.kernelBoot.container or add a disk backed by a hostDisk or containerDisk volume"}
	}
	return nil
}

// setFixedDevices adds what every domain has: the SCSI and virtio-serial
// controllers, the guest agent's channel, the balloon, the serial console
// (unless turned off) and the pvpanic device.
func setFixedDevices(dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, opts DomainOptions) {
	model := virtioModel(vmi)
	dom.Devices.Controllers = append(dom.Devices.Controllers,
		libvirtxml.DomainController{Type: "scsi", Index: ptr(uint(0)), Model: model},
		libvirtxml.DomainController{Type: "virtio-serial", Index: ptr(uint(0)), Model: model})
	// The guest agent's channel. Its socket goes into the per-VMI folder:
	// the path libvirt would pick under an embedded root is longer than a
	// unix socket path may be.
	qga := &libvirtxml.DomainChardevSourceUNIX{}
	if opts.ScratchDir != "" {
		qga = &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: filepath.Join(opts.ScratchDir, "qga.sock")}
	}
	dom.Devices.Channels = []libvirtxml.DomainChannel{{
		Source: &libvirtxml.DomainChardevSource{UNIX: qga},
		Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
	}}
	setBalloon(dom, vmi)
	consoleLog := opts.ConsoleLog
	if a := vmi.Spec.Domain.Devices.AutoattachSerialConsole; a != nil && !*a {
		consoleLog = ""
	}
	if consoleLog != "" {
		port := uint(0)
		dom.Devices.Serials = []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: consoleLog}},
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
}

func ptr[T any](v T) *T { return &v }

// balloonStatsPeriod is virt-handler's default memBalloonStatsPeriod (s).
const balloonStatsPeriod = 10

// setBalloon attaches KubeVirt's default memory balloon: virtio with
// statistics every 10 s and free page reporting, unless
// autoattachMemBalloon is false (then model none, as KubeVirt). Free page
// reporting is off for VMIs with dedicated CPUs, as KubeVirt.
func setBalloon(dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance) {
	if a := vmi.Spec.Domain.Devices.AutoattachMemBalloon; a != nil && !*a {
		dom.Devices.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "none"}
		return
	}
	b := &libvirtxml.DomainMemBalloon{Model: virtioModel(vmi), Stats: &libvirtxml.DomainMemBalloonStats{Period: balloonStatsPeriod}}
	if !vmi.IsHighPerformanceVMI() && vmi.Annotations[v1.FreePageReportingDisabledAnnotation] != "true" {
		b.FreePageReporting = "on"
	}
	dom.Devices.MemBalloon = b
}

// virtioModel is the model KubeVirt gives virtio devices:
// virtio-non-transitional, or virtio-transitional when the VMI asks for
// useVirtioTransitional.
func virtioModel(vmi *v1.VirtualMachineInstance) string {
	if t := vmi.Spec.Domain.Devices.UseVirtioTransitional; t != nil && *t {
		return "virtio-transitional"
	}
	return "virtio-non-transitional"
}

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

// setCPU sets the vCPUs and their topology; the counts are admission's
// (admission.Topology: 64-bit products, each checked, so a topology that
// wraps around in 32 bits is refused, not taken for a few vCPUs).
func setCPU(dom *libvirtxml.Domain, cpu *v1.CPU, accel Accel) error {
	if cpu != nil {
		switch cpu.Model {
		case "", v1.CPUModeHostModel:
			// KubeVirt's default. Under KVM the launcher uses host-model.
			// Under TCG KubeVirt asks for host-model too, which libvirt 9.0
			// expands to TCG's best model from its capability probe (an
			// EPYC-based one), not the host's CPU; the launcher leaves the
			// mode out there, so the guest gets QEMU's qemu64, the same on
			// every host. libvirt reads the guest CPU back at start either
			// way (one qom-get per feature, ~250 ms here; see the README).
		default:
			return &SpecError{Field: "spec.domain.cpu.model", Msg: fmt.Sprintf("%s is not supported (allowed: host-model, KubeVirt's default)", launcherapi.Quote(cpu.Model))}
		}
	}
	t, err := admission.Topology(cpu)
	if err != nil {
		var te *admission.TopologyError
		if errors.As(err, &te) {
			return &SpecError{Field: te.Field, Msg: te.Msg}
		}
		return err
	}
	dom.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Value: uint(t.Enabled)}
	dom.CPU = &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: int(t.Sockets), Cores: int(t.Cores), Threads: int(t.Threads)}}
	if t.Total > t.Enabled {
		// As KubeVirt: room to hot-plug up to maxSockets sockets, the
		// requested vCPUs enabled, those of the first socket fixed.
		dom.VCPU.Value = uint(t.Total)
		dom.CPU.Topology.Sockets = int(cpu.MaxSockets)
		dom.VCPUs = &libvirtxml.DomainVCPUs{}
		for id := uint32(0); id < t.Total; id++ {
			dom.VCPUs.VCPU = append(dom.VCPUs.VCPU, libvirtxml.DomainVCPUsVCPU{
				Id: ptr(uint(id)), Enabled: yesNo(id < t.Enabled), Hotpluggable: yesNo(id >= t.Cores*t.Threads),
			})
		}
	}
	if accel == AccelKVM {
		dom.CPU.Mode = "host-model"
	}
	return nil
}

func setMemory(dom *libvirtxml.Domain, d *v1.DomainSpec, notes *[]string) error {
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
	return checkMaxGuest(d, q, notes)
}

// checkMaxGuest takes spec.domain.memory.maxGuest, the memory-hotplug room
// that KubeVirt's defaults give a VMI of 1Gi or more (pkg/kvdefaults; on a
// cluster virt-api adds it, so virt-handler hands it over). KubeVirt renders
// it as <maxMemory slots="0">, which libvirt 9.0 refuses ("both maximum
// memory size and memory slot count must be specified"), so the domain has
// no hotplug room: the guest boots with its memory and the note says so.
// Below the guest's memory it is refused, as virt-api does.
func checkMaxGuest(d *v1.DomainSpec, guest *resource.Quantity, notes *[]string) error {
	if d.Memory == nil || d.Memory.MaxGuest == nil {
		return nil
	}
	maxGuest := d.Memory.MaxGuest
	if maxGuest.Cmp(*guest) < 0 {
		return &SpecError{Field: "spec.domain.memory.maxGuest", Msg: fmt.Sprintf("%s is below the guest's memory %s (allowed: at least the guest's memory)", maxGuest.String(), guest.String())}
	}
	if maxGuest.Cmp(*guest) > 0 {
		*notes = append(*notes, fmt.Sprintf("spec.domain.memory.maxGuest %s: no memory-hotplug room in the domain (libvirt 9.0 takes no maxMemory without slots); the guest boots with %s and cannot hot-plug more", maxGuest.String(), guest.String()))
	}
	return nil
}

func setKernelBoot(dom *libvirtxml.Domain, fw *v1.Firmware, opts *DomainOptions) error {
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
	kernel, err := kernelBootFile(opts, c.Image, c.KernelPath, "spec.domain.firmware.kernelBoot.container")
	if err != nil {
		return err
	}
	dom.OS.Kernel = kernel
	if c.InitrdPath != "" {
		initrd, err := kernelBootFile(opts, c.Image, c.InitrdPath, "spec.domain.firmware.kernelBoot.container.initrdPath")
		if err != nil {
			return err
		}
		dom.OS.Initrd = initrd
	}
	dom.OS.Cmdline = kb.KernelArgs
	return nil
}
