package launcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// CrashPoint names a point of the lifecycle where an injected launcher
// crash happens.
type CrashPoint string

// Crash points, in lifecycle order.
const (
	CrashBeforeLibvirt CrashPoint = "before-libvirt"
	CrashBeforeDefine  CrashPoint = "before-define"
	CrashBeforeStart   CrashPoint = "before-start"
	CrashAfterRunning  CrashPoint = "after-running"
)

// Injections are the faults that act on this launch, already decided by
// pkg/faults. The zero value injects nothing.
type Injections struct {
	// CrashAt makes the launcher die of a panic at that point, after
	// CrashDelay.
	CrashAt    CrashPoint
	CrashDelay time.Duration
	// LibvirtErrorAt makes the libvirt call "define" or "start" fail,
	// after LibvirtErrorDelay.
	LibvirtErrorAt    string
	LibvirtErrorDelay time.Duration
	// StartDelay holds QEMU's start back (the delay of a start fault).
	StartDelay time.Duration
	// StartPaused starts QEMU with its vCPUs stopped; ResumeAfter > 0
	// resumes them after that long (slow start), 0 never does (hang).
	StartPaused bool
	ResumeAfter time.Duration
	// Kill sends a signal to QEMU After its start.
	Kill *KillInjection
	// Armed are faults already applied to the domain (guest directives,
	// disk errors, a bad kernel): they are announced when QEMU starts.
	Armed []FiredFault
	// Names maps each injection above to the fault name for its event.
	Names map[string]string
}

// KillInjection sends Signal to QEMU After its start.
type KillInjection struct {
	Signal syscall.Signal
	After  time.Duration
}

// FiredFault describes a fault for its FaultFired event.
type FiredFault struct {
	Name    string
	Message string
	Details map[string]any
}

// Config is everything one launch needs.
type Config struct {
	VMI         *v1.VirtualMachineInstance
	Domain      *libvirtxml.Domain
	Session     qemu.SessionOptions
	ConsoleLog  string
	ReadyMarker string
	QemuTimeout time.Duration
	GracePeriod time.Duration
	Injections  Injections
	Clock       clock.WithTicker
	Events      *Emitter
	Log         *slog.Logger
}

// Result is how a launch ended.
type Result struct {
	Phase    string
	Reason   string
	Message  string
	ExitCode ExitCode
}

type launch struct {
	cfg      Config
	dom      *qemu.Domain
	running  bool
	ready    bool
	panicked bool
	shutdown bool // libvirt reported a guest shutdown
	killed   string
	stopping bool
	startAt  time.Time
	// qemuExit receives QEMU's wait status when this process reaps it.
	qemuExit chan syscall.WaitStatus
	// cleanups undo what run set up, in reverse order, after the final
	// event is out (destroying a domain can wait on libvirt's own
	// clean-up of a dead QEMU).
	cleanups []func()
}

// Run performs one launch: libvirt, define, start, wait for Running within
// the start timeout, then follow the domain until it stops. Cancelling ctx
// asks for a graceful stop (SIGTERM): ACPI shutdown, then destroy after the
// grace period. Run always destroys and undefines what it started before
// it returns. The caller owns the per-VMI folder and the reaper (StartReaper),
// which it starts before anything is created, so that a launcher that dies at
// any point, even before Run, leaves nothing behind.
func Run(ctx context.Context, cfg Config) Result {
	l := &launch{cfg: cfg, qemuExit: make(chan syscall.WaitStatus, 1)}
	defer func() {
		for i := len(l.cleanups) - 1; i >= 0; i-- {
			l.cleanups[i]()
		}
	}()
	res := l.run(ctx)
	code := int(res.ExitCode)
	ev := Event{Time: cfg.Clock.Now(), Phase: res.Phase, Reason: res.Reason, Message: res.Message, ExitCode: &code}
	if res.Phase == PhaseSucceeded {
		ev.Event = EventSucceeded
	} else {
		ev.Event = EventFailed
	}
	if err := cfg.Events.Emit(ev); err != nil {
		cfg.Log.Error("could not write the final event", "err", err)
	}
	return res
}

func failed(code ExitCode, reason, format string, args ...any) Result {
	return Result{Phase: PhaseFailed, Reason: reason, Message: fmt.Sprintf(format, args...), ExitCode: code}
}

func (l *launch) crashIf(p CrashPoint) {
	if l.cfg.Injections.CrashAt != p {
		return
	}
	if d := l.cfg.Injections.CrashDelay; d > 0 {
		l.cfg.Clock.Sleep(d)
	}
	l.fire(FiredFault{Name: l.name("crash"), Message: "launcher crashes " + string(p), Details: map[string]any{"at": string(p)}})
	// Panic on a fresh goroutine: the process dies the way a real crash
	// kills it, without running this goroutine's deferred cleanup. The
	// reaper is what cleans up after it.
	done := make(chan struct{})
	go func() {
		panic(fmt.Sprintf("Simulated virt-launcher crash (fault %s at %s)", l.name("crash"), p))
	}()
	<-done
}

func (l *launch) name(key string) string {
	if n := l.cfg.Injections.Names[key]; n != "" {
		return n
	}
	return key
}

func (l *launch) fire(f FiredFault) {
	if err := l.cfg.Events.Emit(Event{Time: l.cfg.Clock.Now(), Event: EventFaultFired, Phase: l.phase(), Fault: f.Name, Message: f.Message, Details: f.Details}); err != nil {
		l.cfg.Log.Error("writing event", "err", err)
	}
}

func (l *launch) phase() string {
	if l.running {
		return PhaseRunning
	}
	return PhaseScheduled
}

func (l *launch) run(ctx context.Context) (res Result) {
	cfg := l.cfg
	clk := cfg.Clock
	timeout := clk.NewTimer(cfg.QemuTimeout)
	defer timeout.Stop()
	deadline := clk.Now().Add(cfg.QemuTimeout)

	l.crashIf(CrashBeforeLibvirt)
	sess, err := qemu.Open(cfg.Session)
	if err != nil {
		return failed(ExitLibvirtError, ReasonLibvirtError, "%v", err)
	}
	l.cleanups = append(l.cleanups, func() {
		if err := sess.Close(); err != nil {
			cfg.Log.Warn("closing libvirt", "err", err)
		}
	})

	l.crashIf(CrashBeforeDefine)
	if cfg.Injections.LibvirtErrorAt == "define" {
		clk.Sleep(cfg.Injections.LibvirtErrorDelay)
		l.fire(FiredFault{Name: l.name("libvirt-error"), Message: "libvirt define fails", Details: map[string]any{"at": "define"}})
		return failed(ExitLibvirtError, ReasonLibvirtError, "defining domain %s: injected libvirt error (fault %s)", cfg.Domain.Name, l.name("libvirt-error"))
	}
	dom, err := sess.Define(cfg.Domain)
	if err != nil {
		return failed(ExitLibvirtError, ReasonLibvirtError, "%v", err)
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

	l.crashIf(CrashBeforeStart)
	if cfg.Injections.LibvirtErrorAt == "start" {
		clk.Sleep(cfg.Injections.LibvirtErrorDelay)
		l.fire(FiredFault{Name: l.name("libvirt-error"), Message: "libvirt start fails", Details: map[string]any{"at": "start"}})
		return failed(ExitLibvirtError, ReasonLibvirtError, "starting domain %s: injected libvirt error (fault %s)", cfg.Domain.Name, l.name("libvirt-error"))
	}
	if ctx.Err() != nil {
		return Result{Phase: PhaseSucceeded, Reason: ReasonStopped, Message: "stopped before QEMU started", ExitCode: ExitSucceeded}
	}
	for _, f := range cfg.Injections.Armed {
		l.fire(f)
	}
	consoleCtx, stopConsole := context.WithCancel(ctx)
	defer stopConsole()
	var console <-chan qemu.ConsoleLine
	if cfg.ConsoleLog != "" {
		// Start from an empty log, so a previous run's lines are never
		// taken for this guest's.
		if err := os.WriteFile(cfg.ConsoleLog, nil, 0o644); err != nil {
			return failed(ExitInternal, ReasonInternalError, "creating console log: %v", err)
		}
		console = qemu.WatchConsole(consoleCtx, clk, cfg.ConsoleLog, 20*time.Millisecond)
	}

	inj := cfg.Injections
	if inj.StartPaused {
		msg := "QEMU starts paused and is never resumed"
		if inj.ResumeAfter > 0 {
			msg = fmt.Sprintf("QEMU starts paused and is resumed after %v", inj.ResumeAfter)
		}
		key := "hang"
		if inj.ResumeAfter > 0 {
			key = "slow-start"
		}
		l.fire(FiredFault{Name: l.name(key), Message: msg})
	}
	if inj.StartDelay > 0 {
		clk.Sleep(inj.StartDelay)
	}
	// QEMU is daemonized; as a child subreaper (set by the command) this
	// process inherits it. Reaping it the moment it exits lets libvirt see
	// it gone: a zombie counts as alive, and libvirt would wait for it
	// (80 s for a QEMU that refuses its configuration during start).
	reapCtx, stopReaping := context.WithCancel(context.Background())
	defer stopReaping()
	go l.reapQEMU(reapCtx)
	l.startAt = clk.Now()
	if err := dom.Start(inj.StartPaused); err != nil {
		if dom.QEMUStarted() || l.isQemuError(err) {
			return failed(ExitQemuFailed, ReasonQemuFailed, "%v", err)
		}
		return failed(ExitLibvirtError, ReasonLibvirtError, "%v", err)
	}

	var resume, kill <-chan time.Time
	if inj.StartPaused && inj.ResumeAfter > 0 {
		t := clk.NewTimer(inj.ResumeAfter)
		defer t.Stop()
		resume = t.C()
	}
	if inj.Kill != nil {
		t := clk.NewTimer(inj.Kill.After)
		defer t.Stop()
		kill = t.C()
	}
	if err := l.checkRunning(); err != nil {
		return failed(ExitLibvirtError, ReasonLibvirtError, "%v", err)
	}

	var grace <-chan time.Time
	stopRequested := ctx.Done()
	for {
		select {
		case <-stopRequested:
			stopRequested = nil
			l.stopping = true
			if !l.running {
				cfg.Log.Info("stop requested before the domain was running; destroying it")
				_ = dom.Destroy()
				return Result{Phase: PhaseSucceeded, Reason: ReasonStopped, Message: "stopped before the domain was running", ExitCode: ExitSucceeded}
			}
			cfg.Log.Info("stop requested: pressing the ACPI power button", "gracePeriod", cfg.GracePeriod)
			if err := dom.Shutdown(); err != nil {
				cfg.Log.Warn("graceful shutdown failed; destroying", "err", err)
				_ = dom.Destroy()
				return Result{Phase: PhaseSucceeded, Reason: ReasonStopped, Message: "stopped: graceful shutdown failed, domain destroyed", ExitCode: ExitSucceeded}
			}
			t := clk.NewTimer(cfg.GracePeriod)
			defer t.Stop()
			grace = t.C()
		case <-grace:
			_ = dom.Destroy()
			return Result{Phase: PhaseSucceeded, Reason: ReasonStopped, Message: fmt.Sprintf("stopped: the guest did not shut down within the %v grace period; domain destroyed", cfg.GracePeriod), ExitCode: ExitSucceeded}
		case <-timeout.C():
			if l.running {
				continue
			}
			_ = dom.Destroy()
			return failed(ExitQemuStartTimeout, ReasonQemuStartTimeout, "the domain was not running within the QEMU start timeout of %v (deadline %s); destroyed", cfg.QemuTimeout, deadline.UTC().Format(time.RFC3339Nano))
		case <-resume:
			resume = nil
			if err := dom.Resume(); err != nil {
				cfg.Log.Warn("resuming the slow-start domain", "err", err)
			}
		case <-kill:
			kill = nil
			l.killed = unixSignalName(inj.Kill.Signal)
			l.fire(FiredFault{Name: l.name("kill"), Message: fmt.Sprintf("sending %s to QEMU", unixSignalName(inj.Kill.Signal)), Details: map[string]any{"signal": unixSignalName(inj.Kill.Signal), "after": inj.Kill.After.String()}})
			if err := dom.Kill(inj.Kill.Signal); err != nil {
				cfg.Log.Warn("killing QEMU", "err", err)
			}
		case ev := <-dom.Events():
			cfg.Log.Debug("domain event", "kind", ev.Kind, "reason", ev.Reason)
			switch ev.Kind {
			case qemu.EventStarted, qemu.EventResumed:
				if err := l.checkRunning(); err != nil {
					cfg.Log.Warn("reading domain state", "err", err)
				}
			case qemu.EventCrashed:
				l.panicked = l.panicked || ev.Panicked
			case qemu.EventShutdown:
				l.shutdown = true
			case qemu.EventStopped:
				return l.stopped(ev)
			}
		case ws := <-l.qemuExit:
			// A QEMU that died of a signal without libvirt having reported a
			// guest shutdown or crash first was killed from outside (or
			// crashed itself): say so now rather than after libvirt's own
			// clean-up, which polls a dying process every 200 ms. A clean
			// exit is libvirt's doing; its Stopped event follows.
			if ws.Signaled() && !l.panicked && !l.shutdown {
				cfg.Log.Debug("QEMU died", "signal", ws.Signal())
				if l.killed == "" {
					l.killed = unixSignalName(ws.Signal())
				}
				return l.stopped(qemu.DomainEvent{Kind: qemu.EventStopped, Reason: qemu.StopFailed})
			}
		case line, ok := <-console:
			if !ok {
				console = nil
				continue
			}
			cfg.Log.Debug("console", "line", line.Text)
			if !l.ready && cfg.ReadyMarker != "" && strings.Contains(line.Text, cfg.ReadyMarker) {
				l.ready = true
				if err := cfg.Events.Emit(Event{Time: line.At, Event: EventGuestReady, Phase: l.phase(), Message: line.Text}); err != nil {
					cfg.Log.Error("writing event", "err", err)
				}
			}
		}
	}
}

// checkRunning emits Running the first time the domain is seen running.
func (l *launch) checkRunning() error {
	if l.running {
		return nil
	}
	running, err := l.dom.Running()
	if err != nil || !running {
		return err
	}
	l.running = true
	now := l.cfg.Clock.Now()
	if err := l.cfg.Events.Emit(Event{Time: now, Event: EventRunning, Phase: PhaseRunning,
		Details: map[string]any{"startSeconds": now.Sub(l.startAt).Seconds()}}); err != nil {
		l.cfg.Log.Error("writing event", "err", err)
	}
	l.crashIf(CrashAfterRunning)
	return nil
}

func (l *launch) stopped(ev qemu.DomainEvent) Result {
	if l.stopping {
		return Result{Phase: PhaseSucceeded, Reason: ReasonStopped, Message: "stopped: the guest shut down within the grace period", ExitCode: ExitSucceeded}
	}
	switch {
	case ev.Reason == qemu.StopShutdown && l.killed == "":
		return Result{Phase: PhaseSucceeded, Reason: ReasonGuestShutdown, Message: "the guest powered off", ExitCode: ExitSucceeded}
	case ev.Reason == qemu.StopCrashed || l.panicked:
		if !l.running {
			return failed(ExitQemuFailed, ReasonQemuFailed, "the guest crashed before the domain was running")
		}
		return failed(ExitVMCrashed, ReasonGuestPanicked, "the guest kernel panicked (pvpanic); libvirt stopped the domain with reason crashed")
	}
	how := "QEMU exited unexpectedly"
	if l.killed != "" {
		how = "QEMU was killed by " + l.killed
	}
	if !l.running {
		return failed(ExitQemuFailed, ReasonQemuFailed, "%s before the domain was running (libvirt: stopped, %s)", how, ev.Reason)
	}
	return failed(ExitVMCrashed, ReasonVMCrashed, "%s after the domain was running (libvirt: stopped, %s)", how, ev.Reason)
}

// isQemuError tells a QEMU refusal (its process exited during start) from
// a libvirt-side failure by libvirt's message, for an external libvirt
// where QEMUStarted cannot look at the domain's log. libvirt words it
// differently depending on how far QEMU got.
func (l *launch) isQemuError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "qemu unexpectedly closed the monitor") ||
		strings.Contains(msg, "QEMU unexpectedly closed") ||
		strings.Contains(msg, "process exited while connecting to monitor") ||
		strings.Contains(msg, "monitor socket did not show up") ||
		strings.Contains(msg, "qemu: ") ||
		strings.Contains(msg, "qemu-system")
}

func unixSignalName(s syscall.Signal) string {
	for _, n := range []struct {
		s syscall.Signal
		n string
	}{{syscall.SIGKILL, "SIGKILL"}, {syscall.SIGTERM, "SIGTERM"}, {syscall.SIGSEGV, "SIGSEGV"}, {syscall.SIGABRT, "SIGABRT"},
		{syscall.SIGINT, "SIGINT"}, {syscall.SIGQUIT, "SIGQUIT"}, {syscall.SIGHUP, "SIGHUP"}, {syscall.SIGBUS, "SIGBUS"}} {
		if n.s == s {
			return n.n
		}
	}
	return s.String()
}

// reapQEMU waits for QEMU's pid to appear, then reaps QEMU when it exits.
func (l *launch) reapQEMU(ctx context.Context) {
	const poll = 5 * time.Millisecond
	for ctx.Err() == nil {
		pid, err := l.dom.PID()
		if err != nil {
			l.cfg.Clock.Sleep(poll)
			continue
		}
		for ctx.Err() == nil {
			if ws, ok := reapChild(pid); ok {
				l.qemuExit <- ws
				return
			}
			// Not our child yet (libvirt's intermediate process has not
			// exited), or already gone.
			if syscall.Kill(pid, 0) != nil {
				return
			}
			l.cfg.Clock.Sleep(poll)
		}
	}
}
