package faults

import (
	"fmt"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Point is a step of the launcher's lifecycle at which a fault acts.
type Point string

// The lifecycle points, in the order the launcher reaches them.
const (
	// PointBeforeLibvirt is right after the launcher read its input, before it connects to libvirt.
	PointBeforeLibvirt Point = "before-libvirt"
	// PointBuildDomain is while the launcher turns the VMI into domain XML
	// (kernel path and command line, disks, whether QEMU starts paused).
	PointBuildDomain Point = "build-domain"
	// PointBeforeDefine is right before the libvirt define call.
	PointBeforeDefine Point = "before-define"
	// PointDefine is the libvirt define call itself.
	PointDefine Point = "define"
	// PointBeforeStart is right before the libvirt start (create) call.
	PointBeforeStart Point = "before-start"
	// PointStart is the libvirt start (create) call itself.
	PointStart Point = "start"
	// PointAfterStart is once the domain has started, while the launcher waits for Running.
	PointAfterStart Point = "after-start"
	// PointAfterRunning is once the VMI has been reported Running.
	PointAfterRunning Point = "after-running"
	// PointCommandSocket is the launcher pod's command socket in KubeVirt
	// mode, from Running on. virt-launcher-monitor serves that socket and
	// applies the faults placed here; the launcher itself has no socket
	// and leaves them to it.
	PointCommandSocket Point = "command-socket"
)

// ExitNone marks an outcome where the launcher does not exit because of
// the fault (the VMI keeps running). Every other outcome's exit code is
// one of launcherapi's.
const ExitNone launcherapi.ExitCode = -1

// Outcome is what a fault produces under a condition, as documentation data:
// the final phase and reason the launcher reports and its exit code.
type Outcome struct {
	// When is the condition, empty if the outcome is unconditional.
	When string
	// Phase is the final VMI phase reported, empty if no final event is sent.
	Phase string
	// Reason is the reason attached to the phase, empty if none.
	Reason string
	// Exit is the launcher's exit code, ExitNone if it keeps running.
	Exit launcherapi.ExitCode
}

// Param describes one parameter of a fault.
type Param struct {
	// Name is the parameter name as written in a fault term.
	Name string
	// Type names the value type for people: "duration", "signal", ...
	Type string
	// Default is the default in canonical form, or a description of it
	// ("first disk"); empty for a required parameter.
	Default string
	// Required parameters have no default and must be given.
	Required bool
	// Allowed lists the accepted values, in canonical form; nil when the
	// type is open (a duration, a disk name).
	Allowed []string
	// Doc is a one-line description.
	Doc string

	kind kind
	def  any // the default value, as the kind parses it
}

// Definition is one entry of the fault catalog.
type Definition struct {
	// Name is the user-facing fault name.
	Name string
	// ActsAt says, for people, where in the lifecycle the fault acts.
	ActsAt string
	// Description is a one-line description of what the fault does.
	Description string
	// Params are the fault's own parameters, in canonical order. The
	// modifiers common to every fault (P%, N*, delay, attempts) are not listed.
	Params []Param
	// Outcomes are what the fault produces, as documentation data.
	Outcomes []Outcome

	// wholeSeconds: after and delay must be whole seconds (the guest counts them).
	wholeSeconds bool
	// action builds the typed action from a parsed spec; delay is the effective delay.
	action func(s Spec, delay time.Duration) (Action, Point)
}

// maxDuration bounds every duration so that after+delay cannot overflow.
const maxDuration = 24 * time.Hour

var (
	crashPoints   = []string{string(PointBeforeLibvirt), string(PointBeforeDefine), string(PointBeforeStart), string(PointAfterRunning)}
	libvirtCalls  = []string{string(PointDefine), string(PointStart)}
	diskOps       = []string{string(DiskOpRead), string(DiskOpWrite), string(DiskOpAll)}
	afterDoc      = "time from the domain start to the action"
	guestAfterDoc = "whole seconds from guest readiness to the action"
)

// catalog is the fault catalog, in the order faults are documented and planned.
var catalog = []Definition{
	{
		Name:        "launcher-crash",
		ActsAt:      "launcher, at `at`",
		Description: "The launcher panics: a real process death with no final event.",
		Params: []Param{
			enumParam("at", string(PointBeforeLibvirt), crashPoints, "where the launcher panics"),
		},
		Outcomes: []Outcome{{When: "process dies, no final event", Exit: launcherapi.ExitPanic}},
		action: func(s Spec, d time.Duration) (Action, Point) {
			at := Point(s.params["at"].(string))
			return LauncherCrash{At: at, Delay: d}, at
		},
	},
	{
		Name:        "libvirt-error",
		ActsAt:      "libvirt call `at`",
		Description: "The launcher's libvirt call fails with an injected error.",
		Params: []Param{
			enumParam("at", string(PointStart), libvirtCalls, "which libvirt call fails"),
		},
		Outcomes: []Outcome{{Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonLibvirtError, Exit: launcherapi.ExitLibvirtError}},
		action: func(s Spec, d time.Duration) (Action, Point) {
			at := Point(s.params["at"].(string))
			return LibvirtError{At: at, Delay: d}, at
		},
	},
	{
		Name:        "qemu-hang",
		ActsAt:      "domain start",
		Description: "QEMU is started paused and never resumed, so the start timeout fires.",
		Outcomes:    []Outcome{{Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonQemuStartTimeout, Exit: launcherapi.ExitQemuStartTimeout}},
		action: func(_ Spec, d time.Duration) (Action, Point) {
			return QemuHang{Delay: d}, PointStart
		},
	},
	{
		Name:        "qemu-slow-start",
		ActsAt:      "domain start",
		Description: "QEMU is started paused and resumed `after` later.",
		Params: []Param{
			{Name: "after", Type: "duration", Required: true, Doc: "how long QEMU stays paused", kind: durationKind{}},
		},
		Outcomes: []Outcome{
			{When: "resumed within the start timeout", Phase: launcherapi.PhaseRunning, Exit: ExitNone},
			{When: "otherwise", Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonQemuStartTimeout, Exit: launcherapi.ExitQemuStartTimeout},
		},
		action: func(_ Spec, d time.Duration) (Action, Point) {
			return QemuSlowStart{After: d}, PointStart
		},
	},
	{
		Name:        "qemu-kill",
		ActsAt:      "after domain start",
		Description: "The launcher sends QEMU `signal`, `after` the domain started.",
		Params: []Param{
			{Name: "signal", Type: "signal", Default: "SIGKILL", Allowed: signalNames(), Doc: "the signal sent to QEMU (SIG prefix optional, any case)", kind: signalKind{}, def: syscall.SIGKILL},
			durationParam("after", afterDoc),
		},
		Outcomes: []Outcome{
			{When: "before Running", Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonQemuFailed, Exit: launcherapi.ExitQemuFailed},
			{When: "after Running", Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonVMCrashed, Exit: launcherapi.ExitVMCrashed},
		},
		action: func(s Spec, d time.Duration) (Action, Point) {
			return QemuKill{Signal: s.params["signal"].(syscall.Signal), After: d}, PointAfterStart
		},
	},
	{
		Name:        "qemu-bad-config",
		ActsAt:      "domain XML",
		Description: "QEMU is given a kernel path that does not exist, so it refuses to start (libvirt may name it LibvirtError; the exit code is 12 either way).",
		Outcomes:    []Outcome{{Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonQemuFailed, Exit: launcherapi.ExitQemuFailed}},
		action: func(_ Spec, d time.Duration) (Action, Point) {
			return QemuBadConfig{KernelPath: BadKernelPath, Delay: d}, PointBuildDomain
		},
	},
	{
		Name:         "guest-panic",
		ActsAt:       "guest (kernel cmdline `harness.panic=N`)",
		Description:  "The guest kernel panics `after` it is ready; pvpanic reports it.",
		Params:       []Param{durationParam("after", guestAfterDoc)},
		Outcomes:     []Outcome{{Phase: launcherapi.PhaseFailed, Reason: launcherapi.ReasonGuestPanicked, Exit: launcherapi.ExitVMCrashed}},
		wholeSeconds: true,
		action: func(_ Spec, d time.Duration) (Action, Point) {
			return GuestPanic{After: d}, PointBuildDomain
		},
	},
	{
		Name:         "guest-poweroff",
		ActsAt:       "guest (kernel cmdline `harness.poweroff=N`)",
		Description:  "The guest powers itself off `after` it is ready.",
		Params:       []Param{durationParam("after", guestAfterDoc)},
		Outcomes:     []Outcome{{Phase: launcherapi.PhaseSucceeded, Reason: launcherapi.ReasonGuestShutdown, Exit: launcherapi.ExitSucceeded}},
		wholeSeconds: true,
		action: func(_ Spec, d time.Duration) (Action, Point) {
			return GuestPowerOff{After: d}, PointBuildDomain
		},
	},
	{
		Name:        "guest-noready",
		ActsAt:      "guest (kernel cmdline `harness.noready`)",
		Description: "The guest never prints its readiness marker.",
		Outcomes:    []Outcome{{Phase: launcherapi.PhaseRunning, Exit: ExitNone}},
		action: func(_ Spec, d time.Duration) (Action, Point) {
			return GuestNoReady{Delay: d}, PointBuildDomain
		},
	},
	{
		Name:        "disk-io-error",
		ActsAt:      "domain XML (QEMU blkdebug)",
		Description: "QEMU's blkdebug makes a disk fail; the guest prints HARNESS-DISK-READ-ERROR.",
		Params: []Param{
			{Name: "disk", Type: "disk name", Default: "first disk", Doc: "the VMI disk that fails", kind: diskKind{}, def: ""},
			enumParam("op", string(DiskOpRead), diskOps, "which requests fail"),
			{Name: "errno", Type: "errno", Default: "5", Allowed: errnoAllowed(), Doc: "the error returned (number or name)", kind: errnoKind{}, def: syscall.EIO},
		},
		Outcomes: []Outcome{{When: "guest prints HARNESS-DISK-READ-ERROR", Phase: launcherapi.PhaseRunning, Exit: ExitNone}},
		action: func(s Spec, d time.Duration) (Action, Point) {
			return DiskIOError{
				Disk:  s.params["disk"].(string),
				Op:    DiskOp(s.params["op"].(string)),
				Errno: s.params["errno"].(syscall.Errno),
				Delay: d,
			}, PointBuildDomain
		},
	},
	{
		Name:   "launcher-socket-unresponsive",
		ActsAt: "KubeVirt mode: the pod's command socket, from Running (virt-launcher-monitor)",
		Description: "The launcher pod's command server stops `after` Running: its listener and connections close, the socket file stays, " +
			"so dials are refused, as virt-handler's stale-socket watchdog tests; it listens again `for` later. The launcher alone, without a socket, only notes it.",
		Params: []Param{
			{Name: "after", Type: "duration", Default: "0s", Doc: "time from Running to the socket's close", kind: durationKind{}, def: time.Duration(0)},
			{Name: "for", Type: "duration", Required: true, Doc: "how long the socket refuses dials", kind: durationKind{}},
		},
		Outcomes: []Outcome{{When: "the domain", Phase: launcherapi.PhaseRunning, Exit: ExitNone}},
		action: func(s Spec, d time.Duration) (Action, Point) {
			return LauncherSocketUnresponsive{After: d, For: s.params["for"].(time.Duration)}, PointCommandSocket
		},
	},
}

// modifiers are the parameters every fault takes besides its own.
var modifiers = []Param{
	{Name: "delay", Type: "duration", Default: "0s", Doc: "wait before the action; added to `after` where the fault has one", kind: durationKind{}, def: time.Duration(0)},
	{Name: "attempts", Type: "attempts", Default: "all", Doc: "launch attempts the fault applies to: 2, 1-3, 4-, 1,3,5", kind: attemptsKind{}, def: AttemptSet{}},
}

func enumParam(name, def string, allowed []string, doc string) Param {
	return Param{Name: name, Type: "enum", Default: def, Allowed: allowed, Doc: doc, kind: enumKind{values: allowed}, def: def}
}

func durationParam(name, doc string) Param {
	return Param{Name: name, Type: "duration", Default: "0s", Doc: doc, kind: durationKind{}, def: time.Duration(0)}
}

// Catalog returns the fault catalog, one Definition per fault, in documentation
// order. The result is a copy: changing it changes nothing in the package.
func Catalog() []Definition {
	out := make([]Definition, len(catalog))
	for i, d := range catalog {
		d.Params = append([]Param(nil), d.Params...)
		for j := range d.Params {
			d.Params[j].Allowed = append([]string(nil), d.Params[j].Allowed...)
		}
		d.Outcomes = append([]Outcome(nil), d.Outcomes...)
		out[i] = d
	}
	return out
}

// Names returns the fault names of the catalog, in documentation order.
func Names() []string {
	names := make([]string, len(catalog))
	for i, d := range catalog {
		names[i] = d.Name
	}
	return names
}

// lookup returns the catalog index of the named fault, or -1.
func lookup(name string) int {
	for i := range catalog {
		if catalog[i].Name == name {
			return i
		}
	}
	return -1
}

// param returns the named parameter of d, its own or a modifier.
func (d *Definition) param(name string) (Param, bool) {
	for _, p := range d.Params {
		if p.Name == name {
			return p, true
		}
	}
	for _, p := range modifiers {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// paramNames lists the parameters d accepts, its own then the modifiers.
func (d *Definition) paramNames() []string {
	var names []string
	for _, p := range d.Params {
		names = append(names, p.Name)
	}
	for _, p := range modifiers {
		names = append(names, p.Name)
	}
	return names
}

// The typed actions, one per fault of the catalog, in catalog order.

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

// LauncherSocketUnresponsive: After Running, the pod's command socket
// refuses dials For that long (KubeVirt mode's monitor applies it).
type LauncherSocketUnresponsive struct {
	After time.Duration // after + delay, from Running
	For   time.Duration
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

// FaultName implements Action.
func (LauncherSocketUnresponsive) FaultName() string { return "launcher-socket-unresponsive" }

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
