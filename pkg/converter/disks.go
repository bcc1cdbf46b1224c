package converter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/internal/confine"
	"github.com/crashloop-harness/crashloop/pkg/admission"
	"github.com/crashloop-harness/crashloop/pkg/cloudinit"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/overlay"
)

func setDisks(ctx context.Context, dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, opts *DomainOptions) error {
	volumes, index, err := volumesByName(vmi)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	next := map[string]int{}
	for i, d := range vmi.Spec.Domain.Devices.Disks {
		field := fmt.Sprintf("spec.domain.devices.disks[%d]", i)
		v, ok := volumes[d.Name]
		if !ok {
			return &SpecError{Field: field + ".name", Msg: fmt.Sprintf("no volume named %s in spec.volumes", launcherapi.Quote(d.Name))}
		}
		if used[d.Name] {
			return &SpecError{Field: field + ".name", Msg: fmt.Sprintf("volume %s is used by two disks", launcherapi.Quote(d.Name))}
		}
		used[d.Name] = true
		if msg := admission.SerialError(d.Serial); msg != "" {
			// The serial reaches QEMU through libvirt: KubeVirt's rule.
			return &SpecError{Field: field + ".serial", Msg: launcherapi.Quote(d.Serial) + ": " + field + " " + msg}
		}
		kind, err := diskKindOf(d, field)
		if err != nil {
			return err
		}
		file, err := diskFileOf(ctx, vmi, d, v, field, fmt.Sprintf("spec.volumes[%d]", index[v.Name]), kind.readonly, opts)
		if err != nil {
			return err
		}
		dom.Devices.Disks = append(dom.Devices.Disks, newDisk(vmi, d, kind, file, diskTargetName(kind.prefix, next[kind.prefix])))
		next[kind.prefix]++
	}
	for i, v := range vmi.Spec.Volumes {
		if !used[v.Name] {
			return &SpecError{Field: fmt.Sprintf("spec.volumes[%d]", i), Msg: fmt.Sprintf("volume %s is not used by any disk in spec.domain.devices.disks", launcherapi.Quote(v.Name))}
		}
	}
	return nil
}

// diskTargetName is the target device name of the n-th (from 0) disk of a
// bus, as libvirt counts them (virDiskNameToIndex): vda..vdz, vdaa..vdaz,
// vdba, ..., vdzz, vdaaa.
func diskTargetName(prefix string, n int) string {
	var letters []byte
	for i := n; i >= 0; i = i/26 - 1 {
		letters = append([]byte{byte('a' + i%26)}, letters...)
	}
	return prefix + string(letters)
}

// volumesByName indexes spec.volumes by name (the volume and its index),
// refusing a name used twice.
func volumesByName(vmi *v1.VirtualMachineInstance) (map[string]*v1.Volume, map[string]int, error) {
	volumes := map[string]*v1.Volume{}
	index := map[string]int{}
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if _, dup := volumes[v.Name]; dup {
			return nil, nil, &SpecError{Field: fmt.Sprintf("spec.volumes[%d].name", i), Msg: fmt.Sprintf("duplicate volume name %s", launcherapi.Quote(v.Name))}
		}
		volumes[v.Name], index[v.Name] = v, i
	}
	return volumes, index, nil
}

// diskKind is what a disk's kind (disk or cdrom) and bus make of it.
type diskKind struct {
	// device is libvirt's disk device: disk or cdrom.
	device string
	// bus is the target bus: virtio or sata.
	bus v1.DiskBus
	// prefix starts the target device name: vd or sd.
	prefix string
	// readonly is what the disk asks for (a cdrom is read-only by default).
	readonly bool
}

// diskKindOf reads a disk's device, bus and read-only flag, refusing a LUN
// and a bus the device cannot have.
func diskKindOf(d v1.Disk, field string) (diskKind, error) {
	device, bus, busField, readonly := "disk", v1.DiskBusVirtio, field+".disk.bus", false
	switch {
	case d.LUN != nil:
		return diskKind{}, &SpecError{Field: field + ".lun", Msg: "is not supported (SCSI pass-through needs a block device): use disk"}
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
		return diskKind{}, &SpecError{Field: busField, Msg: fmt.Sprintf("%s is not supported (allowed: %s)", launcherapi.Quote(string(bus)), allowed)}
	}
	return diskKind{device: device, bus: bus, prefix: prefix, readonly: readonly}, nil
}

// diskFile is the file a disk's domain entry names.
type diskFile struct {
	path, format string
	// backing names the image under an ephemeral disk's overlay.
	backing  *libvirtxml.DomainDiskBackingStore
	readonly bool
}

// diskFileOf resolves a disk's volume to its file and format. An
// ephemeral volume gets a throw-away overlay when writable (and a scratch
// folder exists), or is made read-only.
func diskFileOf(ctx context.Context, vmi *v1.VirtualMachineInstance, d v1.Disk, v *v1.Volume, field, volumeField string, readonly bool, opts *DomainOptions) (diskFile, error) {
	// A volume's name names its files in the per-VMI folder (overlay,
	// empty disk, cloud-init ISO): one path component, whatever checked
	// the VMI before.
	if err := confine.Name(v.Name); err != nil {
		return diskFile{}, &SpecError{Field: volumeField + ".name", Msg: err.Error()}
	}
	src, err := diskSource(ctx, vmi, v, volumeField, opts)
	if err != nil {
		return diskFile{}, err
	}
	path, format := src.path, src.format
	readonly = readonly || src.readonly
	var backing *libvirtxml.DomainDiskBackingStore
	if src.ephemeral && opts.ScratchDir != "" && !readonly {
		// A container disk is ephemeral in KubeVirt: writes go to an
		// overlay that is thrown away, never into the image itself.
		overlay, err := createOverlay(path, format, opts.ScratchDir, d.Name, field, opts.Overlays)
		if err != nil {
			return diskFile{}, &SpecError{Field: field, Msg: err.Error()}
		}
		// KubeVirt names the backing image in the domain too.
		backing = &libvirtxml.DomainDiskBackingStore{Format: &libvirtxml.DomainDiskFormat{Type: format},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}}
		path, format = overlay, "qcow2"
	} else if src.ephemeral {
		readonly = true
	}
	return diskFile{path: path, format: format, backing: backing, readonly: readonly}, nil
}

// newDisk is a disk's domain entry, as KubeVirt writes it, with target
// device dev.
func newDisk(vmi *v1.VirtualMachineInstance, d v1.Disk, kind diskKind, file diskFile, dev string) libvirtxml.DomainDisk {
	disk := libvirtxml.DomainDisk{
		Device:       kind.device,
		Alias:        &libvirtxml.DomainAlias{Name: "ua-" + d.Name},
		Driver:       &libvirtxml.DomainDiskDriver{Name: "qemu", Type: file.format},
		Source:       &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: file.path}},
		Target:       &libvirtxml.DomainDiskTarget{Dev: dev, Bus: string(kind.bus)},
		Serial:       d.Serial,
		BackingStore: file.backing,
	}
	if d.BootOrder != nil {
		disk.Boot = &libvirtxml.DomainDeviceBoot{Order: *d.BootOrder}
	}
	if kind.device == "disk" {
		// As KubeVirt: guest discards free space in the image, and
		// virtio disks are virtio-non-transitional.
		disk.Driver.Discard = "unmap"
		if kind.bus == v1.DiskBusVirtio {
			disk.Model = virtioModel(vmi)
		}
	}
	if file.readonly {
		disk.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	return disk
}

// source is where a volume's disk comes from.
type source struct {
	path string
	// format is the image's, said explicitly as KubeVirt says it: raw for
	// the disks a guest writes (claims, dataVolumes, hostDisks), whose
	// first bytes are never trusted; qcow2 for the images the launcher
	// makes; a containerDisk's as its verified image says.
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
			if !filepath.IsAbs(hd.Path) {
				return source{}, &SpecError{Field: field + ".hostDisk.path", Msg: fmt.Sprintf("%s is not an absolute path", launcherapi.Quote(hd.Path))}
			}
			if err := createSparse(hd.Path, hd.Capacity.Value(), opts.DryRun); err != nil {
				return source{}, &SpecError{Field: field + ".hostDisk", Msg: err.Error()}
			}
		default:
			return source{}, &SpecError{Field: field + ".hostDisk.type", Msg: fmt.Sprintf("%s is not allowed (allowed: Disk, DiskOrCreate)", launcherapi.Quote(string(hd.Type)))}
		}
		// KubeVirt attaches a host disk as raw: the guest writes it.
		return source{path: hd.Path, format: "raw"}, nil
	case v.ContainerDisk != nil:
		return containerDiskSource(vmi, v, field, opts)
	case v.PersistentVolumeClaim != nil:
		p, err := claimFile(opts.ClaimDir, v.PersistentVolumeClaim.ClaimName, field+".persistentVolumeClaim.claimName")
		return source{path: p, format: "raw", readonly: v.PersistentVolumeClaim.ReadOnly}, err
	case v.DataVolume != nil:
		for i := range opts.DataVolumeTemplates {
			if dvt := &opts.DataVolumeTemplates[i]; dvt.Name == v.DataVolume.Name {
				if err := importDataVolume(ctx, dvt, fmt.Sprintf("spec.dataVolumeTemplates[%d]", i), opts); err != nil {
					return source{}, err
				}
				if opts.DryRun {
					return source{path: filepath.Join(opts.ClaimDir, dvt.Name, "disk.img"), format: "raw"}, nil
				}
			}
		}
		p, err := claimFile(opts.ClaimDir, v.DataVolume.Name, field+".dataVolume.name")
		return source{path: p, format: "raw"}, err
	case v.Ephemeral != nil:
		if v.Ephemeral.PersistentVolumeClaim == nil {
			return source{}, &SpecError{Field: field + ".ephemeral.persistentVolumeClaim", Msg: "must be set"}
		}
		p, err := claimFile(opts.ClaimDir, v.Ephemeral.PersistentVolumeClaim.ClaimName, field+".ephemeral.persistentVolumeClaim.claimName")
		return source{path: p, format: "raw", ephemeral: true}, err
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
		p, err := data.WriteISO(ctx, opts.ScratchDir, "cloudinit-"+v.Name+".iso")
		if err != nil {
			return source{}, &SpecError{Field: field, Msg: err.Error()}
		}
		// KubeVirt attaches the cloud-init ISO writable (the guest may
		// not write to an ISO 9660 file system, but the disk is not
		// marked read-only).
		return source{path: p, format: "raw"}, nil
	}
	return source{}, &SpecError{Field: field, Msg: "unsupported volume source (supported: hostDisk, containerDisk, persistentVolumeClaim, dataVolume, ephemeral, emptyDisk, cloudInitNoCloud, cloudInitConfigDrive)"}
}

// claimFile is a claim's disk image in KubeVirt's file-system PVC layout,
// found through an os.Root of the claim folder: a claim folder or image
// that is a symbolic link out of it is refused.
func claimFile(dir, name, field string) (string, error) {
	if name == "" {
		return "", &SpecError{Field: field, Msg: "must be set"}
	}
	if dir == "" {
		return "", &SpecError{Field: field, Msg: fmt.Sprintf("claim %q needs a claim folder (pass --claim-dir DIR; the claim is DIR/%s/disk.img)", name, name)}
	}
	if err := confine.Name(name); err != nil {
		return "", &SpecError{Field: field, Msg: "claim name " + err.Error()}
	}
	p, _, err := confine.Stat(dir, name, "disk.img")
	if err != nil {
		return "", &SpecError{Field: field, Msg: fmt.Sprintf("claim %q has no disk image %s: %v", name, p, err)}
	}
	return p, nil
}

// createEmptyDisk makes a sparse qcow2 of size bytes with qemu-img, as
// emptydisk-NAME.qcow2 of dir, created owner-only through an os.Root of
// dir first.
func createEmptyDisk(ctx context.Context, dir, name string, size int64) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating empty-disk folder: %w", err)
	}
	p, err := confine.Reserve(dir, 0o600, "emptydisk-"+name+".qcow2")
	if err != nil {
		return "", fmt.Errorf("creating empty disk: %w", err)
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", p, strconv.FormatInt(size, 10)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("creating empty disk %s with qemu-img: %v: %s", p, err, strings.TrimSpace(string(out)))
	}
	return p, nil
}

// createSparse makes a DiskOrCreate host disk of size bytes unless it
// exists, creating its folder first as KubeVirt does (it mounts the parent
// folder as DirectoryOrCreate). A dry run only checks.
func createSparse(path string, size int64, dryRun bool) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if size <= 0 {
		return fmt.Errorf("type DiskOrCreate needs a capacity to create %s", path)
	}
	if dryRun {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the disk's folder: %w", err)
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

// createOverlay makes a qcow2 overlay of image in dir with qemu-img; with
// pending set it only starts qemu-img and adds it there (field names the
// disk in its error).
func createOverlay(image, format, dir, name, field string, pending *[]overlay.Pending) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating overlay folder: %w", err)
	}
	file := "overlay-" + name + ".qcow2"
	if pending == nil {
		return overlay.Create(image, format, dir, file)
	}
	p, path, err := overlay.Start(image, format, dir, file)
	if err != nil {
		return "", err
	}
	p.Field = field
	*pending = append(*pending, p)
	return path, nil
}
