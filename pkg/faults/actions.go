package faults

import (
	"fmt"
	"syscall"
	"time"
)

// Action is the typed form of a firing fault: one of LauncherCrash,
// LibvirtError, QemuHang, QemuSlowStart, QemuKill, QemuBadConfig, GuestPanic,
// GuestPowerOff, GuestNoReady, DiskIOError. Faults without `after` carry the
// delay modifier as Delay: the launcher waits that long at the point before
// acting. Faults with `after` carry after+delay as After.
type Action interface {
	// FaultName returns the catalog name of the fault.
	FaultName() string
}

// LauncherCrash: the launcher panics at At (exit 2, no final event).
type LauncherCrash struct {
	At    Point // PointBeforeLibvirt, PointBeforeDefine, PointBeforeStart or PointAfterRunning
	Delay time.Duration
}

// LibvirtError: the libvirt call At fails with an injected error.
type LibvirtError struct {
	At    Point // PointDefine or PointStart
	Delay time.Duration
}

// QemuHang: QEMU is started paused and never resumed.
type QemuHang struct {
	Delay time.Duration
}

// QemuSlowStart: QEMU is started paused and resumed After later.
type QemuSlowStart struct {
	After time.Duration // after + delay
}

// QemuKill: the launcher sends Signal to QEMU After the domain started.
type QemuKill struct {
	Signal syscall.Signal
	After  time.Duration // after + delay, from domain start
}

// BadKernelPath is the kernel path qemu-bad-config gives QEMU; it does not exist.
const BadKernelPath = "/nonexistent/crashloop-fault/vmlinuz"

// QemuBadConfig: the domain's kernel is KernelPath, which does not exist.
type QemuBadConfig struct {
	KernelPath string
	Delay      time.Duration
}

// GuestPanic: the guest kernel panics After it is ready (whole seconds).
type GuestPanic struct {
	After time.Duration // after + delay, whole seconds
}

// GuestPowerOff: the guest powers off After it is ready (whole seconds).
type GuestPowerOff struct {
	After time.Duration // after + delay, whole seconds
}

// GuestNoReady: the guest never prints its readiness marker.
type GuestNoReady struct {
	Delay time.Duration
}

// DiskOp is which requests disk-io-error makes fail.
type DiskOp string

// The DiskOp values.
const (
	DiskOpRead  DiskOp = "read"
	DiskOpWrite DiskOp = "write"
	DiskOpAll   DiskOp = "all"
)

// DiskIOError: QEMU's blkdebug makes Op requests to Disk fail with Errno.
type DiskIOError struct {
	Disk  string // VMI disk name; "" means the first disk
	Op    DiskOp
	Errno syscall.Errno
	Delay time.Duration
}

// FaultName implements Action.
func (LauncherCrash) FaultName() string { return "launcher-crash" }

// FaultName implements Action.
func (LibvirtError) FaultName() string { return "libvirt-error" }

// FaultName implements Action.
func (QemuHang) FaultName() string { return "qemu-hang" }

// FaultName implements Action.
func (QemuSlowStart) FaultName() string { return "qemu-slow-start" }

// FaultName implements Action.
func (QemuKill) FaultName() string { return "qemu-kill" }

// FaultName implements Action.
func (QemuBadConfig) FaultName() string { return "qemu-bad-config" }

// FaultName implements Action.
func (GuestPanic) FaultName() string { return "guest-panic" }

// FaultName implements Action.
func (GuestPowerOff) FaultName() string { return "guest-poweroff" }

// FaultName implements Action.
func (GuestNoReady) FaultName() string { return "guest-noready" }

// FaultName implements Action.
func (DiskIOError) FaultName() string { return "disk-io-error" }

// KernelArg is the guest command-line directive: harness.panic=N.
func (g GuestPanic) KernelArg() string { return fmt.Sprintf("harness.panic=%d", g.After/time.Second) }

// KernelArg is the guest command-line directive: harness.poweroff=N.
func (g GuestPowerOff) KernelArg() string {
	return fmt.Sprintf("harness.poweroff=%d", g.After/time.Second)
}

// KernelArg is the guest command-line directive: harness.noready.
func (GuestNoReady) KernelArg() string { return "harness.noready" }

// KernelArg is the guest command-line directive that makes the guest read
// its first disk and report the result: harness.readdisk.
func (DiskIOError) KernelArg() string { return "harness.readdisk" }

func find[T Action](d Decisions) (T, bool) {
	for _, x := range d {
		if a, ok := x.Action.(T); ok {
			return a, true
		}
	}
	var zero T
	return zero, false
}

// LauncherCrash returns the launcher-crash action, if it fires.
func (d Decisions) LauncherCrash() (LauncherCrash, bool) { return find[LauncherCrash](d) }

// LibvirtError returns the libvirt-error action, if it fires.
func (d Decisions) LibvirtError() (LibvirtError, bool) { return find[LibvirtError](d) }

// QemuHang returns the qemu-hang action, if it fires.
func (d Decisions) QemuHang() (QemuHang, bool) { return find[QemuHang](d) }

// QemuSlowStart returns the qemu-slow-start action, if it fires.
func (d Decisions) QemuSlowStart() (QemuSlowStart, bool) { return find[QemuSlowStart](d) }

// QemuKill returns the qemu-kill action, if it fires.
func (d Decisions) QemuKill() (QemuKill, bool) { return find[QemuKill](d) }

// QemuBadConfig returns the qemu-bad-config action, if it fires.
func (d Decisions) QemuBadConfig() (QemuBadConfig, bool) { return find[QemuBadConfig](d) }

// GuestPanic returns the guest-panic action, if it fires.
func (d Decisions) GuestPanic() (GuestPanic, bool) { return find[GuestPanic](d) }

// GuestPowerOff returns the guest-poweroff action, if it fires.
func (d Decisions) GuestPowerOff() (GuestPowerOff, bool) { return find[GuestPowerOff](d) }

// GuestNoReady returns the guest-noready action, if it fires.
func (d Decisions) GuestNoReady() (GuestNoReady, bool) { return find[GuestNoReady](d) }

// DiskIOError returns the disk-io-error action, if it fires.
func (d Decisions) DiskIOError() (DiskIOError, bool) { return find[DiskIOError](d) }
