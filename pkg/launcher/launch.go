package launcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/clock"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/hypervisor"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
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
func Launch(ctx context.Context, p launcherapi.RunPlan, stdout, stderr io.Writer) launcherapi.ExitCode {
	base := launcherapi.DefaultArgs()
	base.ImageDir = ""
	a, log, code, ok := launcherapi.Begin(p.Argv, base, stderr)
	if !ok {
		return code
	}
	log = log.With("vmi", p.VMI.Namespace+"/"+p.VMI.Name)
	children := qemu.NewChildren()
	if p.Reaper != nil {
		// Reap from the moment this process is a subreaper: libvirt's
		// capability probe leaves QEMU zombies here otherwise, and waits
		// for each (80 s on a cold cache). PID 1 of a namespace reaps too.
		if err := qemu.BecomeSubreaper(); err != nil {
			log.Warn("QEMU's exit may be noticed late", "err", err)
		}
		reaper, err := watchdog.Adopt(p.Reaper.PID, p.Reaper.FD)
		if err != nil {
			// Without its pipe the reaper cannot be told "done": it will
			// clean up after this process, which is all that is left to do.
			log.Error("taking over the reaper", "err", err)
			return launcherapi.ExitInternal
		}
		children.Leave(reaper.PID())
		reapCtx, stopReaping := context.WithCancel(context.Background())
		defer stopReaping()
		children.Run(reapCtx)
		defer func() {
			if err := reaper.Done(); err != nil {
				log.Warn("stopping reaper", "err", err)
			}
		}()
	}
	defer removeLaunchFolders(p, log)
	plan, err := faults.Parse(p.Annotations, a.Faults)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", p.Input, err)
		return launcherapi.ExitInvalidManifest
	}
	dom := &libvirtxml.Domain{}
	if err := dom.Unmarshal(p.DomainXML); err != nil {
		log.Error("reading the converted domain", "err", err)
		return launcherapi.ExitInternal
	}

	seed := a.Seed
	if seed == 0 {
		seed = launcherapi.PickSeed()
	}
	qemuTimeout := a.StartTimeout.Draw(seed.Rand("qemu-timeout"))
	grace := 30 * time.Second
	if a.GracePeriod != nil {
		grace = *a.GracePeriod
	} else if p.GracePeriodSeconds != nil {
		grace = time.Duration(*p.GracePeriodSeconds) * time.Second
	}

	decisions := plan.Decide(faults.DecideInput{Seed: seed, Key: p.VMI.Namespace + "/" + p.VMI.Name, Attempt: a.Attempt})
	hooks, err := HooksFor(decisions)
	if err == nil {
		built := &DomainEdit{Domain: dom, Scratch: p.Scratch}
		if err = hooks.BuildDomain(built); err == nil {
			sess := qemu.SessionOptions{URI: a.LibvirtURI, Root: p.Root, CapsCacheDir: a.CacheDir, Children: children}
			return start(ctx, a, p, plan, launchPlan{dom: built, hooks: hooks, seed: seed, timeout: qemuTimeout, grace: grace,
				decisions: decisions, sess: sess}, stdout, log)
		}
	}
	fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", p.Input, err)
	return launcherapi.ExitInvalidManifest
}

// removeLaunchFolders removes the per-VMI libvirt root and a scratch
// folder of its own.
func removeLaunchFolders(p launcherapi.RunPlan, log *slog.Logger) {
	for _, dir := range p.Folders() {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing per-VMI state", "dir", dir, "err", err)
		}
	}
}

// launchPlan is what Launch drew and built for the lifecycle.
type launchPlan struct {
	dom            *DomainEdit
	hooks          Hooks
	seed           launcherapi.Seed
	timeout, grace time.Duration
	decisions      faults.Decisions
	sess           qemu.SessionOptions
}

// start is the dry run, or the Scheduled event and the lifecycle.
func start(ctx context.Context, a launcherapi.Args, rp launcherapi.RunPlan, plan faults.Plan, p launchPlan, stdout io.Writer, log *slog.Logger) launcherapi.ExitCode {
	if a.DryRun {
		return dryRun(stdout, rp.DryRunVMI, p.dom.Domain, log)
	}
	events := NewEmitter(stdout, a.EventFormat, launcherapi.Event{VMI: rp.VMI.Name, Namespace: rp.VMI.Namespace, UID: rp.VMI.UID, Attempt: a.Attempt})
	libvirtMode := "embedded:" + p.sess.Root
	if a.LibvirtURI != "" {
		libvirtMode = a.LibvirtURI
	}
	clk := clock.RealClock{}
	details := map[string]any{
		"qemuTimeout":        p.timeout.String(),
		"qemuTimeoutSeconds": p.timeout.Seconds(),
		"qemuTimeoutBase":    a.StartTimeout.Base.String(),
		"qemuTimeoutJitter":  a.StartTimeout.Jitter.String(),
		"seed":               uint64(p.seed),
		"accel":              rp.Accel,
		"accelReason":        rp.AccelReason,
		"libvirt":            libvirtMode,
		"consoleLog":         rp.ConsoleLog,
		"libvirtLog":         rp.LibvirtLog,
		"gracePeriod":        p.grace.String(),
		"faultPlan":          plan.Summary(),
		"faults":             p.decisions.Summary(),
	}
	if err := events.Emit(launcherapi.Event{Time: clk.Now(), Event: launcherapi.EventScheduled, Phase: launcherapi.PhaseScheduled, Details: details}); err != nil {
		log.Error("writing event", "err", err)
	}

	// libvirt logs to stderr by default, including harmless errors of the
	// embedded driver; keep its log beside the console log instead, unless
	// the user routed it already.
	if os.Getenv("LIBVIRT_LOG_OUTPUTS") == "" {
		os.Setenv("LIBVIRT_LOG_OUTPUTS", "3:file:"+rp.LibvirtLog)
	}
	if p.sess.Root != "" && !qemu.CapsCached(p.sess.CapsCacheDir) {
		log.Info("probing QEMU capabilities, first launch with this cache", "cacheDir", p.sess.CapsCacheDir)
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	defer stopLoop()
	if err := qemu.StartEventLoop(loopCtx); err != nil {
		log.Error("starting libvirt's event loop", "err", err)
		return launcherapi.ExitInternal
	}
	res := Run(ctx, Config{
		Open: func() (hypervisor.Session, error) {
			s, err := qemu.Open(p.sess)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Domain:         p.dom.Domain,
		Built:          p.dom,
		Console:        watchConsole(clk, rp.ConsoleLog, log),
		RunningDetails: runningDetails(rp.Ports),
		ReadyMarker:    a.ReadyMarker,
		QemuTimeout:    p.timeout,
		GracePeriod:    p.grace,
		Hooks:          p.hooks,
		Clock:          clk,
		Events:         events,
		Log:            log,
	})
	log.Info("launch ended", "phase", res.Phase, "reason", res.Reason, "exitCode", int(res.ExitCode))
	return res.ExitCode
}

// watchConsole follows the console log from an empty file, so that a
// previous run's lines are never taken for this guest's.
func watchConsole(clk clock.WithTicker, path string, log *slog.Logger) func(context.Context) <-chan ConsoleLine {
	return func(ctx context.Context) <-chan ConsoleLine {
		if err := os.WriteFile(path, nil, 0o644); err != nil {
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

// runningDetails are the Running event's details beyond its timing: the
// forwarded guest ports under "ports", when there are any.
func runningDetails(ports []launcherapi.PortForward) map[string]any {
	if len(ports) == 0 {
		return nil
	}
	list := make([]map[string]any, 0, len(ports))
	for _, p := range ports {
		list = append(list, map[string]any{
			"interface": p.Interface, "name": p.Name, "protocol": p.Protocol,
			"guestPort": p.GuestPort, "hostIP": p.HostAddress, "hostPort": p.HostPort,
		})
	}
	return map[string]any{"ports": list}
}
