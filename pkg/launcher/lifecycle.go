package launcher

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/hypervisor"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// ConsoleLine is one line of the guest's serial console.
type ConsoleLine struct {
	// At is when the line was read.
	At time.Time
	// Text is the line without its newline.
	Text string
}

// Config is everything one run of the lifecycle needs. The lifecycle
// itself knows no libvirt: it works on the hypervisor seam.
type Config struct {
	// Open connects to the hypervisor.
	Open func() (hypervisor.Session, error)
	// Domain is the domain to define, already edited by the build-domain
	// hooks into Built.
	Domain *libvirtxml.Domain
	// Built is what the build-domain point left for the start (events to
	// announce, a hold); nil when nothing acted there.
	Built *DomainEdit
	// Console, when set, follows the guest's serial console from just
	// before the domain start until ctx ends.
	Console func(ctx context.Context) <-chan ConsoleLine
	// Ports are the forwarded guest ports the Running event lists.
	Ports []launcherapi.PortForward
	// ReadyMarker is the console text of GuestReady; empty disables it.
	ReadyMarker string
	// QemuTimeout is the drawn start timeout, armed when Run starts.
	QemuTimeout time.Duration
	// GracePeriod is how long a stop waits for the guest after the ACPI
	// power button before it destroys the domain.
	GracePeriod time.Duration
	// Hooks act at the lifecycle points (the faults of this launch).
	Hooks Hooks
	// Clock drives every timer and wait.
	Clock clock.WithDelayedExecution
	// Events receives FaultFired, Running, GuestReady and the final event.
	Events *Emitter
	// Log receives the launcher's own log lines.
	Log *slog.Logger
	// Crash ends the process as a crash does; nil means a panic on a
	// fresh goroutine (tests replace it).
	Crash func(message string)
}

// Result is how a launch ended.
type Result struct {
	// Phase is Succeeded or Failed.
	Phase string
	// Reason and Message explain it.
	Reason  string
	Message string
	// ExitCode is the launcher's exit status.
	ExitCode launcherapi.ExitCode
	// Stop is how a stop ended (launcherapi.Stop*), for ReasonStopped.
	Stop string
}

// lifecycle is one run of the lifecycle: what it has seen so far.
type lifecycle struct {
	cfg      Config
	dom      hypervisor.Domain
	running  bool
	ready    bool
	panicked bool
	shutdown bool // the hypervisor reported a guest shutdown
	killed   string
	stopping bool
	started  bool
	startAt  time.Time
	// console delivers the guest's console lines once the start began.
	console <-chan ConsoleLine
	// due receives the functions of Site.After when their time comes;
	// pending are the ones asked for before the domain started.
	due     chan func()
	done    chan struct{}
	pending []pendingAfter
	timers  []clock.Timer
	// cleanups undo what run set up, in reverse order, after the final
	// event is out (destroying a domain can wait on libvirt's own
	// clean-up of a dead QEMU).
	cleanups []func()
}

type pendingAfter struct {
	d  time.Duration
	fn func()
}

// Run performs one launch from the Scheduled event on (see the diagram in
// hooks.go): open the hypervisor, define, start, wait for Running within
// the start timeout, then follow the domain until it stops, and write the
// final event. Cancelling ctx asks for a graceful stop (SIGTERM): the ACPI
// power button, then destroy after the grace period. Run destroys and
// undefines what it started before it returns. The caller owns the
// per-VMI folder and the reaper, which it starts before anything is
// created, so that a launcher that dies at any point leaves nothing behind.
func Run(ctx context.Context, cfg Config) Result {
	if cfg.Crash == nil {
		cfg.Crash = crash
	}
	l := &lifecycle{cfg: cfg, due: make(chan func()), done: make(chan struct{})}
	defer func() {
		close(l.done)
		for _, t := range l.timers {
			t.Stop()
		}
		for i := len(l.cleanups) - 1; i >= 0; i-- {
			l.cleanups[i]()
		}
	}()
	res := l.run(ctx)
	if err := cfg.Events.Emit(res.final(cfg.Clock.Now())); err != nil {
		cfg.Log.Error("could not write the final event", "err", err)
	}
	return res
}

// crash panics on a fresh goroutine: the process dies the way a real crash
// kills it, without running the lifecycle's deferred cleanup.
func crash(message string) {
	done := make(chan struct{})
	go func() { panic(message) }()
	<-done
}

func failed(code launcherapi.ExitCode, reason, format string, args ...any) Result {
	return Result{Phase: launcherapi.PhaseFailed, Reason: reason, Message: fmt.Sprintf(format, args...), ExitCode: code}
}

func stopResult(how, message string) Result {
	return Result{Phase: launcherapi.PhaseSucceeded, Reason: launcherapi.ReasonStopped, Message: message, ExitCode: launcherapi.ExitSucceeded, Stop: how}
}

func (l *lifecycle) fire(f fired) {
	ev := launcherapi.Event{Time: l.cfg.Clock.Now(), Event: launcherapi.EventFaultFired, Phase: l.phase(), Fault: f.name, Message: f.message, Fired: f.details}
	if err := l.cfg.Events.Emit(ev); err != nil {
		l.cfg.Log.Error("writing event", "err", err)
	}
}

func (l *lifecycle) phase() string {
	if l.running {
		return launcherapi.PhaseRunning
	}
	return launcherapi.PhaseScheduled
}

// after schedules fn on the lifecycle's goroutine, d after the domain
// start.
func (l *lifecycle) after(d time.Duration, fn func()) {
	if !l.started {
		l.pending = append(l.pending, pendingAfter{d, fn})
		return
	}
	l.timers = append(l.timers, l.cfg.Clock.AfterFunc(d, func() {
		// Hand fn over on a goroutine of its own: a clock may run this
		// callback while it holds a lock that the lifecycle needs.
		go func() {
			select {
			case l.due <- fn:
			case <-l.done:
			}
		}()
	}))
}

// run is the lifecycle from the Scheduled event to the result: connect,
// define, start, then follow the domain.
func (l *lifecycle) run(ctx context.Context) Result {
	clk := l.cfg.Clock
	timeout := clk.NewTimer(l.cfg.QemuTimeout)
	defer timeout.Stop()
	deadline := clk.Now().Add(l.cfg.QemuTimeout)
	if res, ok := l.connectAndDefine(ctx); !ok {
		return res
	}
	consoleCtx, stopConsole := context.WithCancel(ctx)
	defer stopConsole()
	if res, ok := l.startDomain(ctx, consoleCtx); !ok {
		return res
	}
	return l.follow(ctx, timeout, deadline)
}

// connectAndDefine opens the hypervisor and defines the domain, with the
// hooks before each; ok is false when the launch ended with res.
func (l *lifecycle) connectAndDefine(ctx context.Context) (res Result, ok bool) {
	cfg := l.cfg
	l.at(ctx, faults.PointBeforeLibvirt)
	sess, err := cfg.Open()
	if err != nil {
		return failed(launcherapi.ExitLibvirtError, launcherapi.ReasonLibvirtError, "%v", err), false
	}
	l.cleanups = append(l.cleanups, func() {
		if err := sess.Close(); err != nil {
			cfg.Log.Warn("closing libvirt", "err", err)
		}
	})

	l.at(ctx, faults.PointBeforeDefine)
	if err := l.defineHooks(ctx); err != nil {
		return failed(launcherapi.ExitLibvirtError, launcherapi.ReasonLibvirtError, "defining domain %s: %v", cfg.Domain.Name, err), false
	}
	dom, err := sess.Define(cfg.Domain)
	if err != nil {
		return failed(launcherapi.ExitLibvirtError, launcherapi.ReasonLibvirtError, "%v", err), false
	}
	l.dom = dom
	l.cleanups = append(l.cleanups, func() {
		if err := dom.Destroy(); err != nil {
			cfg.Log.Warn("destroying domain", "err", err)
		}
		if err := dom.Release(); err != nil {
			cfg.Log.Warn("releasing domain", "err", err)
		}
	})
	return Result{}, true
}

// startDomain runs the start hooks, follows the console from consoleCtx
// on, holds the start back as the hooks asked, starts QEMU and runs the
// after-start hooks; ok is false when the launch ended with res.
func (l *lifecycle) startDomain(ctx, consoleCtx context.Context) (res Result, ok bool) {
	cfg, clk := l.cfg, l.cfg.Clock
	l.at(ctx, faults.PointBeforeStart)
	if ctx.Err() != nil {
		return stopResult(launcherapi.StopBeforeRunning, "stopped before QEMU started"), false
	}
	var opts StartOptions
	if cfg.Built != nil {
		opts.Delay = cfg.Built.hold
		for _, f := range cfg.Built.announce {
			l.fire(f)
		}
	}
	if err := l.startHooks(ctx, &opts); err != nil {
		return failed(launcherapi.ExitLibvirtError, launcherapi.ReasonLibvirtError, "starting domain %s: %v", cfg.Domain.Name, err), false
	}
	if cfg.Console != nil {
		l.console = cfg.Console(consoleCtx)
	}
	if opts.Delay > 0 {
		t := clk.NewTimer(opts.Delay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return stopResult(launcherapi.StopBeforeRunning, "stopped before QEMU started"), false
		}
	}
	l.startAt = clk.Now()
	if err := l.dom.Start(opts.Paused); err != nil {
		if l.dom.QEMUStarted() || isQemuError(err) {
			return failed(launcherapi.ExitQemuFailed, launcherapi.ReasonQemuFailed, "%v", err), false
		}
		return failed(launcherapi.ExitLibvirtError, launcherapi.ReasonLibvirtError, "%v", err), false
	}
	l.started = true
	for _, p := range l.pending {
		l.after(p.d, p.fn)
	}
	l.pending = nil
	l.at(ctx, faults.PointAfterStart)
	if err := l.checkRunning(ctx); err != nil {
		return failed(launcherapi.ExitLibvirtError, launcherapi.ReasonLibvirtError, "%v", err), false
	}
	return Result{}, true
}

// follow waits on the domain, the start timeout, a stop request, the
// hooks' timers and the console until the launch ends.
func (l *lifecycle) follow(ctx context.Context, timeout clock.Timer, deadline time.Time) Result {
	cfg, dom := l.cfg, l.dom
	var grace <-chan time.Time
	stopRequested := ctx.Done()
	for {
		select {
		case <-stopRequested:
			stopRequested = nil
			res, t, done := l.stop()
			if done {
				return res
			}
			defer t.Stop()
			grace = t.C()
		case <-grace:
			_ = dom.Destroy()
			return stopResult(launcherapi.StopDestroyed, fmt.Sprintf("stopped: the guest did not shut down within the %v grace period; domain destroyed", cfg.GracePeriod))
		case <-timeout.C():
			if l.running {
				continue
			}
			_ = dom.Destroy()
			return failed(launcherapi.ExitQemuStartTimeout, launcherapi.ReasonQemuStartTimeout, "the domain was not running within the QEMU start timeout of %v (deadline %s); destroyed", cfg.QemuTimeout, deadline.UTC().Format(time.RFC3339Nano))
		case fn := <-l.due:
			fn()
		case ev := <-dom.Events():
			if res, done := l.domainEvent(ctx, ev); done {
				return res
			}
		case ws := <-dom.Exited():
			if res, done := l.qemuExited(ws); done {
				return res
			}
		case line, ok := <-l.console:
			if !ok {
				l.console = nil
				continue
			}
			l.consoleLine(line)
		}
	}
}

// stop answers a stop request: destroy a domain that is not running yet,
// else press the ACPI power button and arm the grace period's timer t.
// done is true when the launch ended with res.
func (l *lifecycle) stop() (res Result, t clock.Timer, done bool) {
	cfg, dom := l.cfg, l.dom
	l.stopping = true
	if !l.running {
		cfg.Log.Info("stop requested before the domain was running; destroying it")
		_ = dom.Destroy()
		return stopResult(launcherapi.StopBeforeRunning, "stopped before the domain was running"), nil, true
	}
	cfg.Log.Info("stop requested: pressing the ACPI power button", "gracePeriod", cfg.GracePeriod)
	if err := dom.Shutdown(); err != nil {
		cfg.Log.Warn("graceful shutdown failed; destroying", "err", err)
		_ = dom.Destroy()
		return stopResult(launcherapi.StopDestroyed, "stopped: graceful shutdown failed, domain destroyed"), nil, true
	}
	return Result{}, cfg.Clock.NewTimer(cfg.GracePeriod), false
}

// domainEvent takes in one event of the domain; done is true when the
// domain stopped and the launch ended with res.
func (l *lifecycle) domainEvent(ctx context.Context, ev hypervisor.Event) (res Result, done bool) {
	l.cfg.Log.Debug("domain event", "kind", ev.Kind, "reason", ev.Reason)
	switch ev.Kind {
	case hypervisor.EventStarted, hypervisor.EventResumed:
		if err := l.checkRunning(ctx); err != nil {
			l.cfg.Log.Warn("reading domain state", "err", err)
		}
	case hypervisor.EventCrashed:
		l.panicked = l.panicked || ev.Panicked
	case hypervisor.EventShutdown:
		l.shutdown = true
	case hypervisor.EventStopped:
		return l.domainStopped(ev), true
	}
	return Result{}, false
}

// qemuExited takes in QEMU's exit status. A QEMU that died of a signal
// without libvirt having reported a guest shutdown or crash first was
// killed from outside (or crashed itself): say so now rather than after
// libvirt's own clean-up, which polls a dying process every 200 ms. A
// clean exit is libvirt's doing; its Stopped event follows.
func (l *lifecycle) qemuExited(ws syscall.WaitStatus) (res Result, done bool) {
	if !ws.Signaled() || l.panicked || l.shutdown {
		return Result{}, false
	}
	l.cfg.Log.Debug("QEMU died", "signal", ws.Signal())
	if l.killed == "" {
		l.killed = signalName(ws.Signal())
	}
	return l.domainStopped(hypervisor.Event{Kind: hypervisor.EventStopped, Reason: hypervisor.StopFailed}), true
}

// consoleLine emits GuestReady the first time the console shows the
// ready marker.
func (l *lifecycle) consoleLine(line ConsoleLine) {
	cfg := l.cfg
	cfg.Log.Debug("console", "line", line.Text)
	if l.ready || cfg.ReadyMarker == "" || !strings.Contains(line.Text, cfg.ReadyMarker) {
		return
	}
	l.ready = true
	ev := launcherapi.Event{Time: line.At, Event: launcherapi.EventGuestReady, Phase: l.phase(), Message: line.Text}
	if err := cfg.Events.Emit(ev); err != nil {
		cfg.Log.Error("writing event", "err", err)
	}
}

// checkRunning emits Running the first time the domain is seen running,
// then runs the after-running hooks.
func (l *lifecycle) checkRunning(ctx context.Context) error {
	if l.running {
		return nil
	}
	running, err := l.dom.Running()
	if err != nil || !running {
		return err
	}
	l.running = true
	now := l.cfg.Clock.Now()
	details := &launcherapi.RunningDetails{StartSeconds: now.Sub(l.startAt).Seconds(), Ports: l.cfg.Ports}
	ev := launcherapi.Event{Time: now, Event: launcherapi.EventRunning, Phase: launcherapi.PhaseRunning, Running: details}
	if err := l.cfg.Events.Emit(ev); err != nil {
		l.cfg.Log.Error("writing event", "err", err)
	}
	l.at(ctx, faults.PointAfterRunning)
	return nil
}

// domainStopped is the launch's result once the domain stopped.
func (l *lifecycle) domainStopped(ev hypervisor.Event) Result {
	if l.stopping && l.killed != signalName(syscall.SIGKILL) {
		return stopResult(launcherapi.StopGraceful, "stopped: the guest shut down within the grace period")
	}
	if l.stopping {
		// QEMU was SIGKILLed from outside while the guest was shutting
		// down (the kernel's OOM killer, say; libvirt's own clean-up after
		// a guest shutdown sends SIGTERM, and our destroy at the end of the
		// grace period does not come here): a crash, not a stop, as
		// virt-handler reports a domain that shut off crashed.
		return failed(launcherapi.ExitVMCrashed, launcherapi.ReasonVMCrashed, "QEMU was killed by %s while the guest was shutting down (libvirt: stopped, %s)", l.killed, ev.Reason)
	}
	switch {
	case ev.Reason == hypervisor.StopShutdown && l.killed == "":
		return Result{Phase: launcherapi.PhaseSucceeded, Reason: launcherapi.ReasonGuestShutdown, Message: "the guest powered off", ExitCode: launcherapi.ExitSucceeded}
	case ev.Reason == hypervisor.StopCrashed || l.panicked:
		if !l.running {
			return failed(launcherapi.ExitQemuFailed, launcherapi.ReasonQemuFailed, "the guest crashed before the domain was running")
		}
		return failed(launcherapi.ExitVMCrashed, launcherapi.ReasonGuestPanicked, "the guest kernel panicked (pvpanic); libvirt stopped the domain with reason crashed")
	}
	how := "QEMU exited unexpectedly"
	if l.killed != "" {
		how = "QEMU was killed by " + l.killed
	}
	if !l.running {
		return failed(launcherapi.ExitQemuFailed, launcherapi.ReasonQemuFailed, "%s before the domain was running (libvirt: stopped, %s)", how, ev.Reason)
	}
	return failed(launcherapi.ExitVMCrashed, launcherapi.ReasonVMCrashed, "%s after the domain was running (libvirt: stopped, %s)", how, ev.Reason)
}

// isQemuError tells a QEMU refusal (its process exited during start) from
// a libvirt-side failure by libvirt's message, for an external libvirt
// where QEMUStarted cannot look at the domain's log. libvirt words it
// differently depending on how far QEMU got.
func isQemuError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "qemu unexpectedly closed the monitor") ||
		strings.Contains(msg, "QEMU unexpectedly closed") ||
		strings.Contains(msg, "process exited while connecting to monitor") ||
		strings.Contains(msg, "monitor socket did not show up") ||
		strings.Contains(msg, "qemu: ") ||
		strings.Contains(msg, "qemu-system")
}

// signalName names a signal as the kernel does (SIGKILL), the names the
// fault catalog takes too.
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}
