package launcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/internal/confine"
	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/hypervisor"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/overlay"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

// Launch runs one launch from the plan the converter process made: it
// takes over the reaper, reaps this process's children, removes the
// per-VMI folders at the end, draws the seed, start timeout and grace
// period, lets the faults edit the domain, then prints a dry run, or emits
// the Scheduled event and runs the lifecycle (Run). It returns the
// launcher's exit code; cancelling ctx asks for a graceful stop. stdout
// receives the events (or the dry run), stderr the messages for bad input
// and the reaper's log.
func Launch(ctx context.Context, p launchplan.RunPlan, stdout, stderr io.Writer) launcherapi.ExitCode {
	log := launchplan.Logger(p.Args, stderr).With("vmi", p.VMI.Namespace+"/"+p.VMI.Name)
	// The converter's qemu-img ran while this program was exec'd; reap it
	// before this process reaps its children in bulk.
	overlayErr := overlay.WaitAll(p.Overlays)
	children := qemu.NewChildren()
	if p.Reaper != nil {
		release, err := takeOverReaper(*p.Reaper, children, log)
		if err != nil {
			// Without its pipe the reaper cannot be told "done": it will
			// clean up after this process, which is all that is left to do.
			log.Error("taking over the reaper", "err", err)
			return launcherapi.ExitInternal
		}
		defer release()
	}
	defer removeLaunchFolders(p, log)
	if overlayErr != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", p.Input, overlayErr)
		return launcherapi.ExitInvalidManifest
	}
	dom := &libvirtxml.Domain{}
	if err := dom.Unmarshal(p.DomainXML); err != nil {
		log.Error("reading the converted domain", "err", err)
		return launcherapi.ExitInternal
	}
	d := draw(p)
	for _, x := range d.decisions.At(faults.PointCommandSocket) {
		log.Info("fault "+x.Fault+" acts on a KubeVirt-mode pod's command socket, which virt-launcher-monitor serves; this launcher has none, so it only notes it",
			"fault", x.Spec.String())
	}
	hooks, err := HooksFor(d.decisions)
	if err == nil {
		d.dom = &DomainEdit{Domain: dom, Scratch: p.Scratch}
		if err = hooks.BuildDomain(d.dom); err == nil {
			d.hooks = hooks
			d.sess = qemu.SessionOptions{URI: p.Args.LibvirtURI, Root: p.Root, CapsCacheDir: p.Args.CacheDir, Children: children}
			return schedule(ctx, p, d, stdout, log)
		}
	}
	fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", p.Input, err)
	return launcherapi.ExitInvalidManifest
}

// takeOverReaper makes this process a subreaper that reaps its children
// from now on, and takes over the reaper the converter started; release
// tells the reaper the launch is done and stops reaping.
func takeOverReaper(r launchplan.Reaper, children *qemu.Children, log *slog.Logger) (release func(), err error) {
	// Reap from the moment this process is a subreaper: libvirt's
	// capability probe leaves QEMU zombies here otherwise, and waits for
	// each. PID 1 of a namespace reaps too.
	if err := qemu.BecomeSubreaper(); err != nil {
		log.Warn("QEMU's exit may be noticed late", "err", err)
	}
	reaper, err := watchdog.Adopt(r.PID, r.FD)
	if err != nil {
		return nil, err
	}
	children.Leave(reaper.PID())
	reapCtx, stopReaping := context.WithCancel(context.Background())
	children.Run(reapCtx)
	return func() {
		if err := reaper.Done(); err != nil {
			log.Warn("stopping reaper", "err", err)
		}
		stopReaping()
	}, nil
}

// removeLaunchFolders removes the per-VMI libvirt root and a scratch
// folder of its own.
func removeLaunchFolders(p launchplan.RunPlan, log *slog.Logger) {
	for _, dir := range p.Folders() {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing per-VMI state", "dir", dir, "err", err)
		}
	}
}

// drawn is what Launch drew and built for the lifecycle.
type drawn struct {
	dom            *DomainEdit
	hooks          Hooks
	seed           launcherapi.Seed
	timeout, grace time.Duration
	decisions      faults.Decisions
	sess           qemu.SessionOptions
}

// draw draws the launch's seed (unless --seed gave one), its start
// timeout from it, the grace period and the faults that fire.
func draw(p launchplan.RunPlan) drawn {
	a := p.Args
	d := drawn{seed: a.Seed, grace: 30 * time.Second}
	if d.seed == 0 {
		d.seed = launcherapi.PickSeed()
	}
	d.timeout = a.StartTimeout.Draw(d.seed.Rand("qemu-timeout"))
	if a.GracePeriod != nil {
		d.grace = *a.GracePeriod
	} else if p.GracePeriodSeconds != nil {
		d.grace = time.Duration(*p.GracePeriodSeconds) * time.Second
	}
	d.decisions = p.Faults.Decide(faults.DecideInput{Seed: d.seed, Key: p.VMI.Namespace + "/" + p.VMI.Name, Attempt: a.Attempt})
	return d
}

// scheduled is the Scheduled event's values.
func scheduled(p launchplan.RunPlan, d drawn) *launcherapi.ScheduledDetails {
	libvirtMode := "embedded:" + d.sess.Root
	if p.Args.LibvirtURI != "" {
		libvirtMode = p.Args.LibvirtURI
	}
	return &launcherapi.ScheduledDetails{
		QemuTimeout:        d.timeout.String(),
		QemuTimeoutSeconds: d.timeout.Seconds(),
		QemuTimeoutBase:    p.Args.StartTimeout.Base.String(),
		QemuTimeoutJitter:  p.Args.StartTimeout.Jitter.String(),
		Seed:               uint64(d.seed),
		Accel:              p.Accel,
		AccelReason:        p.AccelReason,
		Libvirt:            libvirtMode,
		ConsoleLog:         p.ConsoleLog,
		LibvirtLog:         p.LibvirtLog,
		GracePeriod:        d.grace.String(),
		FaultPlan:          p.Faults.Summary(),
		Faults:             d.decisions.Summary(),
	}
}

// schedule is the dry run, or the Scheduled event and the lifecycle.
func schedule(ctx context.Context, p launchplan.RunPlan, d drawn, stdout io.Writer, log *slog.Logger) launcherapi.ExitCode {
	a := p.Args
	if a.DryRun {
		return dryRun(stdout, p.DryRunVMI, d.dom.Domain, log)
	}
	events := NewEmitter(stdout, a.EventFormat, launcherapi.Event{VMI: p.VMI.Name, Namespace: p.VMI.Namespace, UID: p.VMI.UID, Attempt: a.Attempt})
	clk := clock.RealClock{}
	if err := events.Emit(launcherapi.Event{Time: clk.Now(), Event: launcherapi.EventScheduled, Phase: launcherapi.PhaseScheduled, Scheduled: scheduled(p, d)}); err != nil {
		log.Error("writing event", "err", err)
	}

	// libvirt logs to stderr by default, including harmless errors of the
	// embedded driver; keep its log beside the console log instead, unless
	// the user routed it already.
	if os.Getenv("LIBVIRT_LOG_OUTPUTS") == "" {
		ownerOnlyLog(p.LibvirtLog, log)
		os.Setenv("LIBVIRT_LOG_OUTPUTS", "3:file:"+p.LibvirtLog)
	}
	if d.sess.Root != "" && !qemu.CapsCached(d.sess.CapsCacheDir) {
		log.Info("probing QEMU capabilities, first launch with this cache", "cacheDir", d.sess.CapsCacheDir)
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	defer stopLoop()
	if err := qemu.StartEventLoop(loopCtx); err != nil {
		log.Error("starting libvirt's event loop", "err", err)
		return launcherapi.ExitInternal
	}
	res := Run(ctx, Config{
		Open: func() (hypervisor.Session, error) {
			s, err := qemu.Open(d.sess)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Domain:      d.dom.Domain,
		Built:       d.dom,
		Console:     watchConsole(clk, p.ConsoleLog, log),
		Ports:       p.Ports,
		ReadyMarker: a.ReadyMarker,
		QemuTimeout: d.timeout,
		GracePeriod: d.grace,
		Hooks:       d.hooks,
		Clock:       clk,
		Events:      events,
		Log:         log,
	})
	log.Info("launch ended", "phase", res.Phase, "reason", res.Reason, "exitCode", int(res.ExitCode))
	return res.ExitCode
}

// ownerOnlyLog makes the log file at path (libvirt appends to it) exist
// with mode 0600 before libvirt opens it: it names the VMI's files. It is
// opened through an os.Root of its folder (internal/confine): a symbolic
// link planted under its name that leads out of the folder is refused.
func ownerOnlyLog(path string, log *slog.Logger) {
	f, _, err := confine.OpenFile(filepath.Dir(path), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600, filepath.Base(path))
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		log.Warn("making the libvirt log owner-only", "path", path, "err", err)
	}
}

// emptyConsole empties the console log at path, owner-only (the console
// carries what the guest prints), through an os.Root of its folder: a
// symbolic link planted under its name that leads out of the folder is
// refused, not emptied.
func emptyConsole(path string) error {
	f, _, err := confine.OpenFile(filepath.Dir(path), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600, filepath.Base(path))
	if err != nil {
		return err
	}
	return f.Close()
}

// watchConsole follows the console log from an empty file, so that a
// previous run's lines are never taken for this guest's.
func watchConsole(clk clock.WithTicker, path string, log *slog.Logger) func(context.Context) <-chan ConsoleLine {
	return func(ctx context.Context) <-chan ConsoleLine {
		if err := emptyConsole(path); err != nil {
			log.Warn("emptying the console log", "err", err)
		}
		in := qemu.WatchConsole(ctx, clk, path, 20*time.Millisecond)
		out := make(chan ConsoleLine)
		go func() {
			defer close(out)
			for line := range in {
				select {
				case out <- ConsoleLine{At: line.At, Text: line.Text}:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out
	}
}

// dryRun prints the VMI as it runs, KubeVirt's defaults applied, as a YAML
// document (rendered by the converter), then the domain XML.
func dryRun(out io.Writer, vmiYAML string, dom *libvirtxml.Domain, log *slog.Logger) launcherapi.ExitCode {
	xml, err := dom.Marshal()
	if err != nil {
		log.Error("rendering domain XML", "err", err)
		return launcherapi.ExitInternal
	}
	fmt.Fprintf(out, "---\n%s", vmiYAML)
	fmt.Fprintln(out, xml)
	return launcherapi.ExitSucceeded
}
