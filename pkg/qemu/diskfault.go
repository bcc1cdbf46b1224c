package qemu

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/internal/confine"
)

// DiskFault makes one disk of a domain fail I/O with an errno, through
// QEMU's blkdebug driver.
type DiskFault struct {
	// Alias is the libvirt alias of the disk ("ua-<VMI disk name>"); empty
	// means the first disk.
	Alias string
	// Read and Write select the failing operations.
	Read, Write bool
	Errno       syscall.Errno
}

// InjectDiskErrors moves the chosen disk out of libvirt's device list and
// onto QEMU's command line (libvirt has no XML for blkdebug): a -blockdev
// raw -> blkdebug -> file chain and a -device of the same bus. The disk
// image is copied into scratch first, so the guest may write to it and the
// original stays untouched (a container disk is ephemeral anyway). The
// blkdebug rules are written to scratch too. It returns the guest-visible
// target (e.g. vda).
func InjectDiskErrors(dom *libvirtxml.Domain, f DiskFault, scratch string) (string, error) {
	idx := -1
	for i, d := range dom.Devices.Disks {
		if f.Alias == "" || (d.Alias != nil && d.Alias.Name == f.Alias) {
			idx = i
			break
		}
	}
	if idx < 0 {
		return "", fmt.Errorf("disk fault: the domain has no disk %q", strings.TrimPrefix(f.Alias, "ua-"))
	}
	disk := dom.Devices.Disks[idx]
	if disk.Source == nil || disk.Source.File == nil {
		return "", fmt.Errorf("disk fault: disk %s is not backed by a file", disk.Target.Dev)
	}
	if disk.Target.Bus != "virtio" {
		return "", fmt.Errorf("disk fault: disk %s is on bus %s; disk faults need bus virtio", disk.Target.Dev, disk.Target.Bus)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return "", fmt.Errorf("disk fault: %w", err)
	}
	// Flatten the disk (an overlay reads through to its backing file, which
	// blkdebug would not see) into a raw copy that blkdebug sits on.
	// Both files are made through an os.Root of the scratch folder: the
	// target name comes from the domain, which hook sidecars may rewrite.
	// A copy of an earlier start of this launch is replaced.
	_ = confine.Remove(scratch, "fault-"+disk.Target.Dev+".img")
	_ = confine.Remove(scratch, "blkdebug-"+disk.Target.Dev+".conf")
	image, err := confine.Reserve(scratch, 0o600, "fault-"+disk.Target.Dev+".img")
	if err != nil {
		return "", fmt.Errorf("disk fault: %w", err)
	}
	srcFormat := "raw"
	if disk.Driver != nil && disk.Driver.Type != "" {
		srcFormat = disk.Driver.Type
	}
	if out, err := exec.Command("qemu-img", "convert", "-f", srcFormat, "-O", "raw", disk.Source.File.File, image).CombinedOutput(); err != nil {
		return "", fmt.Errorf("disk fault: copying disk image with qemu-img: %v: %s", err, strings.TrimSpace(string(out)))
	}
	var rules strings.Builder
	for _, ev := range []struct {
		on    bool
		event string
	}{{f.Read, "read_aio"}, {f.Write, "write_aio"}} {
		if ev.on {
			fmt.Fprintf(&rules, "[inject-error]\nevent = \"%s\"\nerrno = \"%d\"\n\n", ev.event, int(f.Errno))
		}
	}
	conf, err := confine.WriteFile(scratch, []byte(rules.String()), 0o600, "blkdebug-"+disk.Target.Dev+".conf")
	if err != nil {
		return "", fmt.Errorf("disk fault: writing blkdebug rules: %w", err)
	}
	node := "fault-" + disk.Target.Dev
	blockdev, err := json.Marshal(map[string]any{
		"driver":    "raw",
		"node-name": node,
		"file": map[string]any{
			"driver": "blkdebug",
			"config": conf,
			"image":  map[string]any{"driver": "file", "filename": image},
		},
	})
	if err != nil {
		return "", fmt.Errorf("disk fault: %w", err)
	}
	bus, slot := cmdlineSlot(dom)
	device := fmt.Sprintf("virtio-blk-pci,drive=%s,id=%s,bus=%s,addr=%#x", node, node, bus, slot)
	if disk.Serial != "" {
		device += ",serial=" + disk.Serial
	}
	if dom.QEMUCommandline == nil {
		dom.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{}
	}
	dom.QEMUCommandline.Args = append(dom.QEMUCommandline.Args,
		libvirtxml.DomainQEMUCommandlineArg{Value: "-blockdev"},
		libvirtxml.DomainQEMUCommandlineArg{Value: string(blockdev)},
		libvirtxml.DomainQEMUCommandlineArg{Value: "-device"},
		libvirtxml.DomainQEMUCommandlineArg{Value: device},
	)
	dom.Devices.Disks = append(dom.Devices.Disks[:idx], dom.Devices.Disks[idx+1:]...)
	return disk.Target.Dev, nil
}

// cmdlineSlot is the root bus and a free slot on it for one more device on
// QEMU's command line, which libvirt does not know: left to QEMU it takes
// the lowest free slot, which libvirt has given to a controller of its own
// (q35's first pcie-root-port). Slots from 0x1a down are the ones libvirt
// fills last; the forwarded-port NICs take them first (setInterfaces), so
// the next is below the lowest one already on the command line.
func cmdlineSlot(dom *libvirtxml.Domain) (bus string, slot int) {
	bus = "pci.0"
	if dom.OS != nil && dom.OS.Type != nil && strings.Contains(dom.OS.Type.Machine, "q35") {
		bus = "pcie.0"
	}
	slot = 0x1a
	if dom.QEMUCommandline == nil {
		return bus, slot
	}
	for _, arg := range dom.QEMUCommandline.Args {
		for _, opt := range strings.Split(arg.Value, ",") {
			var used int
			if _, err := fmt.Sscanf(opt, "addr=%v", &used); err == nil && used <= slot {
				slot = used - 1
			}
		}
	}
	return bus, slot
}
