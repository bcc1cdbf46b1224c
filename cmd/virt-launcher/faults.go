package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcher"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// applyFaults turns the faults that fire on this launch into lifecycle
// injections and edits of the domain (kernel arguments, a missing kernel,
// a failing disk). scratch is a folder removed with the launch.
func applyFaults(dec faults.Decisions, dom *libvirtxml.Domain, scratch string) (launcher.Injections, error) {
	inj := launcher.Injections{Names: map[string]string{}}
	if c, ok := dec.LauncherCrash(); ok {
		inj.CrashAt, inj.CrashDelay = launcher.CrashPoint(c.At), c.Delay
		inj.Names["crash"] = "launcher-crash"
	}
	if e, ok := dec.LibvirtError(); ok {
		inj.LibvirtErrorAt, inj.LibvirtErrorDelay = string(e.At), e.Delay
		inj.Names["libvirt-error"] = "libvirt-error"
	}
	if h, ok := dec.QemuHang(); ok {
		inj.StartPaused, inj.StartDelay = true, h.Delay
		inj.Names["hang"] = "qemu-hang"
	}
	if s, ok := dec.QemuSlowStart(); ok {
		inj.StartPaused, inj.ResumeAfter = true, s.After
		inj.Names["slow-start"] = "qemu-slow-start"
	}
	if k, ok := dec.QemuKill(); ok {
		inj.Kill = &launcher.KillInjection{Signal: k.Signal, After: k.After}
		inj.Names["kill"] = "qemu-kill"
	}
	if b, ok := dec.QemuBadConfig(); ok {
		inj.StartDelay = max(inj.StartDelay, b.Delay)
		inj.Armed = append(inj.Armed, launcher.FiredFault{Name: "qemu-bad-config",
			Message: "QEMU is given a kernel that does not exist: " + b.KernelPath, Details: map[string]any{"kernel": b.KernelPath}})
		if dom.OS == nil {
			dom.OS = &libvirtxml.DomainOS{}
		}
		dom.OS.Kernel = b.KernelPath
	}
	if d, ok := dec.DiskIOError(); ok {
		alias := ""
		if d.Disk != "" {
			alias = "ua-" + d.Disk
		}
		dev, err := qemu.InjectDiskErrors(dom, qemu.DiskFault{Alias: alias, Read: d.Op != faults.DiskOpWrite, Write: d.Op != faults.DiskOpRead, Errno: d.Errno}, scratch)
		if err != nil {
			return inj, err
		}
		inj.Armed = append(inj.Armed, launcher.FiredFault{Name: "disk-io-error",
			Message: fmt.Sprintf("disk %s fails %s with errno %d (%v)", dev, d.Op, int(d.Errno), d.Errno),
			Details: map[string]any{"device": dev, "op": string(d.Op), "errno": int(d.Errno)}})
	}
	if args := dec.KernelArgs(); len(args) > 0 {
		if dom.OS == nil || dom.OS.Kernel == "" {
			return inj, fmt.Errorf("faults %s act inside the guest through kernel arguments; the VMI must boot with spec.domain.firmware.kernelBoot", guestFaults(dec))
		}
		dom.OS.Cmdline = strings.TrimSpace(dom.OS.Cmdline + " " + strings.Join(args, " "))
		for _, name := range []string{"guest-panic", "guest-poweroff", "guest-noready"} {
			if d, ok := dec.Get(name); ok {
				inj.Armed = append(inj.Armed, launcher.FiredFault{Name: name, Message: "guest directive on the kernel command line", Details: map[string]any{"params": d.Spec.Params()}})
			}
		}
	}
	return inj, nil
}

func guestFaults(dec faults.Decisions) string {
	var names []string
	for _, d := range dec {
		if strings.HasPrefix(d.Fault, "guest-") || d.Fault == "disk-io-error" {
			names = append(names, d.Fault)
		}
	}
	return strings.Join(names, ", ")
}

// diskNames lists the VMI's disk names, for validating disk faults.
func diskNames(vmi *v1.VirtualMachineInstance) []string {
	var names []string
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		names = append(names, d.Name)
	}
	return names
}

// scratchDir is where fault files live: the embedded root, or a temporary
// folder next to it for an external libvirt.
func scratchDir(root, runtimeDir string) (string, func(), error) {
	if root != "" {
		return filepath.Join(root, "scratch"), func() {}, nil
	}
	if err := os.MkdirAll(runtimeDir, 0o755); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(runtimeDir, "faults-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}
