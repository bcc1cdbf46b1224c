package launcher

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// This file is where each fault of pkg/faults acts: one hook per typed
// action, placed at the decision's lifecycle point. A new fault is its
// catalog entry (pkg/faults/catalog.go) and a case here.

// HooksFor places the faults that fire on this launch at their lifecycle
// points.
func HooksFor(dec faults.Decisions) (Hooks, error) {
	var hs Hooks
	for _, d := range dec {
		if d.Point == faults.PointCommandSocket {
			// The pod's monitor serves the command socket and applies
			// these (kubevirtmode/monitor); Launch notes them.
			continue
		}
		h := hookFor(d)
		if h == nil {
			return Hooks{}, fmt.Errorf("fault %s: the launcher does not know where it acts", d.Fault)
		}
		if err := hs.Place(d.Point, h); err != nil {
			return Hooks{}, fmt.Errorf("fault %w", err)
		}
	}
	return hs, nil
}

func hookFor(d faults.Decision) Hook {
	switch a := d.Action.(type) {
	case faults.LauncherCrash:
		return launcherCrash{a}
	case faults.LibvirtError:
		return libvirtError{a}
	case faults.QemuHang:
		return qemuHang{a}
	case faults.QemuSlowStart:
		return qemuSlowStart{a}
	case faults.QemuKill:
		return qemuKill{a}
	case faults.QemuBadConfig:
		return qemuBadConfig{a}
	case faults.DiskIOError:
		return diskIOError{a}
	case kernelArg:
		return guestDirective{d}
	}
	return nil
}

// launcherCrash: the launcher panics at its point (exit 2, no final event).
type launcherCrash struct{ a faults.LauncherCrash }

func (launcherCrash) Name() string { return "launcher-crash" }

func (c launcherCrash) crash(ctx context.Context, s *Site) {
	if !s.Wait(ctx, c.a.Delay) {
		return
	}
	s.Fire("launcher crashes "+string(s.Point()), &launcherapi.FaultDetails{At: string(s.Point())})
	s.Crash()
}

func (c launcherCrash) BeforeLibvirt(ctx context.Context, s *Site) { c.crash(ctx, s) }
func (c launcherCrash) BeforeDefine(ctx context.Context, s *Site)  { c.crash(ctx, s) }
func (c launcherCrash) BeforeStart(ctx context.Context, s *Site)   { c.crash(ctx, s) }
func (c launcherCrash) AfterRunning(ctx context.Context, s *Site)  { c.crash(ctx, s) }

// libvirtError: the libvirt call at its point fails.
type libvirtError struct{ a faults.LibvirtError }

func (libvirtError) Name() string { return "libvirt-error" }

func (e libvirtError) fail(ctx context.Context, s *Site) error {
	if !s.Wait(ctx, e.a.Delay) {
		return nil
	}
	s.Fire("libvirt "+string(s.Point())+" fails", &launcherapi.FaultDetails{At: string(s.Point())})
	return errors.New("injected libvirt error (fault libvirt-error)")
}

func (e libvirtError) Define(ctx context.Context, s *Site) error { return e.fail(ctx, s) }
func (e libvirtError) Start(ctx context.Context, s *Site, _ *StartOptions) error {
	return e.fail(ctx, s)
}

// qemuHang: QEMU starts paused and is never resumed.
type qemuHang struct{ a faults.QemuHang }

func (qemuHang) Name() string { return "qemu-hang" }

func (h qemuHang) Start(_ context.Context, s *Site, o *StartOptions) error {
	o.Paused, o.Delay = true, max(o.Delay, h.a.Delay)
	s.Fire("QEMU starts paused and is never resumed", nil)
	return nil
}

// qemuSlowStart: QEMU starts paused and is resumed After the start.
type qemuSlowStart struct{ a faults.QemuSlowStart }

func (qemuSlowStart) Name() string { return "qemu-slow-start" }

func (h qemuSlowStart) Start(_ context.Context, s *Site, o *StartOptions) error {
	o.Paused = true
	s.Fire(fmt.Sprintf("QEMU starts paused and is resumed after %v", h.a.After), nil)
	s.After(h.a.After, func() {
		if err := s.Resume(); err != nil {
			s.l.cfg.Log.Warn("resuming the slow-start domain", "err", err)
		}
	})
	return nil
}

// qemuKill: QEMU gets a signal After the start.
type qemuKill struct{ a faults.QemuKill }

func (qemuKill) Name() string { return "qemu-kill" }

func (k qemuKill) AfterStart(_ context.Context, s *Site) {
	s.After(k.a.After, func() {
		sig := signalName(k.a.Signal)
		s.Fire("sending "+sig+" to QEMU", &launcherapi.FaultDetails{Signal: sig, After: k.a.After.String()})
		if err := s.Kill(k.a.Signal); err != nil {
			s.l.cfg.Log.Warn("killing QEMU", "err", err)
		}
	})
}

// qemuBadConfig: the domain's kernel does not exist, so QEMU refuses it.
type qemuBadConfig struct{ a faults.QemuBadConfig }

func (qemuBadConfig) Name() string { return "qemu-bad-config" }

func (b qemuBadConfig) BuildDomain(e *DomainEdit) error {
	if e.Domain.OS == nil {
		e.Domain.OS = &libvirtxml.DomainOS{}
	}
	e.Domain.OS.Kernel = b.a.KernelPath
	e.HoldStart(b.a.Delay)
	e.AnnounceAtStart(b, "QEMU is given a kernel that does not exist: "+b.a.KernelPath, &launcherapi.FaultDetails{Kernel: b.a.KernelPath})
	return nil
}

// diskIOError: QEMU's blkdebug fails a disk, and the guest reads it.
type diskIOError struct{ a faults.DiskIOError }

func (diskIOError) Name() string { return "disk-io-error" }

func (d diskIOError) BuildDomain(e *DomainEdit) error {
	alias := ""
	if d.a.Disk != "" {
		alias = "ua-" + d.a.Disk
	}
	dev, err := qemu.InjectDiskErrors(e.Domain, qemu.DiskFault{Alias: alias, Read: d.a.Op != faults.DiskOpWrite, Write: d.a.Op != faults.DiskOpRead, Errno: d.a.Errno}, e.Scratch)
	if err != nil {
		return err
	}
	e.AnnounceAtStart(d, fmt.Sprintf("disk %s fails %s with errno %d (%v)", dev, d.a.Op, int(d.a.Errno), d.a.Errno),
		&launcherapi.FaultDetails{Device: dev, Op: string(d.a.Op), Errno: int(d.a.Errno)})
	return appendKernelArg(e, d.Name(), d.a.KernelArg())
}

// kernelArg is a fault that acts inside the guest through a directive on
// its kernel command line (guest-panic, guest-poweroff, guest-noready).
type kernelArg interface{ KernelArg() string }

// guestDirective passes a guest fault's directive to the test guest.
type guestDirective struct{ d faults.Decision }

func (g guestDirective) Name() string { return g.d.Fault }

func (g guestDirective) BuildDomain(e *DomainEdit) error {
	if err := appendKernelArg(e, g.d.Fault, g.d.Action.(kernelArg).KernelArg()); err != nil {
		return err
	}
	e.AnnounceAtStart(g, "guest directive on the kernel command line", &launcherapi.FaultDetails{Params: g.d.Spec.Params()})
	return nil
}

func appendKernelArg(e *DomainEdit, fault, arg string) error {
	if e.Domain.OS == nil || e.Domain.OS.Kernel == "" {
		return fmt.Errorf("fault %s acts inside the guest through kernel arguments; the VMI must boot with spec.domain.firmware.kernelBoot", fault)
	}
	e.Domain.OS.Cmdline = strings.TrimSpace(e.Domain.OS.Cmdline + " " + arg)
	return nil
}
