package launcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/pkg/containerdisk"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/hypervisor"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// Options are one launch of a VMI that passed the command's input checks.
type Options struct {
	// Args is the parsed and validated command line.
	Args launcherapi.Args
	// VMI is the VMI to run; Plan its faults (annotations and --fault).
	VMI  *v1.VirtualMachineInstance
	Plan faults.Plan
	// Input names the manifest in messages.
	Input string
	// Stdout receives the events (or the domain XML of a dry run); Stderr
	// the messages for bad input and the reaper's log.
	Stdout, Stderr io.Writer
	// Log is the launcher's logger.
	Log *slog.Logger
	// Exe is the launcher binary that runs the reaper; empty means this
	// process's own.
	Exe string
}

// Launch assembles and runs one launch: the accelerator, the image store,
// the console and runtime paths, the reaper, reaping of this process's
// children, the domain and its faults, the seed, start timeout and grace
// period, then a dry run, or the Scheduled event and the lifecycle (Run).
// It returns the launcher's exit code; cancelling ctx asks for a graceful
// stop.
func Launch(ctx context.Context, o Options) launcherapi.ExitCode {
	a, vmi := o.Args, o.VMI
	log := o.Log.With("vmi", vmi.Namespace+"/"+vmi.Name)
	usage := func(flag string, err error) launcherapi.ExitCode {
		fmt.Fprintf(o.Stderr, "virt-launcher: %s: %v\n", flag, err)
		return launcherapi.ExitUsage
	}
	mode, _ := qemu.ParseAccel(a.Accel)
	host, err := qemu.ReadHostVirt()
	if err != nil && mode == qemu.AccelAuto {
		log.Warn("could not read the host's virtualization support", "err", err)
	}
	accel, why := qemu.ChooseAccel(mode, host)
	log.Info("accelerator: "+why, "accel", accel)

	images, err := qemu.OpenImageStore(a.ImageDir)
	if err != nil {
		images = nil
		log.Debug("no image folder", "err", err)
	} else {
		// containerDisks from OCI images are extracted once per manifest
		// digest, beside the QEMU capability cache.
		cd := containerdisk.Options{Logger: log}
		if a.CacheDir != "" {
			cd.CacheDir = filepath.Join(filepath.Dir(a.CacheDir), "containerdisks")
		}
		images.UseContainerDisks(cd)
	}
	consoleLog := a.ConsoleLog
	if consoleLog == "" {
		consoleLog = filepath.Join(launcherapi.DefaultConsoleDir, fmt.Sprintf("%s_%s_%s.console.log", vmi.Namespace, vmi.Name, vmi.UID))
	}
	libvirtLog := strings.TrimSuffix(consoleLog, ".log") + ".libvirt.log"
	if err := os.MkdirAll(filepath.Dir(consoleLog), 0o755); err != nil {
		return usage("--console-log", err)
	}
	children := qemu.NewChildren()
	sess := qemu.SessionOptions{URI: a.LibvirtURI, CapsCacheDir: a.CacheDir, Children: children}
	if a.LibvirtURI == "" {
		if err := os.MkdirAll(a.RuntimeDir, 0o755); err != nil {
			return usage("--runtime-dir", err)
		}
		root, err := os.MkdirTemp(a.RuntimeDir, "vmi-")
		if err != nil {
			return usage("--runtime-dir", err)
		}
		sess.Root = root
	}
	if !a.DryRun {
		// Reap from the moment this process is a subreaper: libvirt's
		// capability probe leaves QEMU zombies here otherwise, and waits
		// for each (80 s on a cold cache). PID 1 of a namespace reaps too.
		if err := qemu.BecomeSubreaper(); err != nil {
			log.Warn("QEMU's exit may be noticed late", "err", err)
		}
		reapCtx, stopReaping := context.WithCancel(context.Background())
		defer stopReaping()
		children.Run(reapCtx)
		// The reaper comes first: whatever happens to this process from
		// now on, it removes the per-VMI folder and any QEMU of the domain.
		exe := o.Exe
		if exe == "" {
			if exe, err = os.Executable(); err != nil {
				os.RemoveAll(sess.Root)
				log.Error("cannot find own executable for the reaper", "err", err)
				return launcherapi.ExitInternal
			}
		}
		reaper, err := StartReaper(exe, ReaperTarget{Domain: qemu.DomainName(vmi), Root: sess.Root, URI: a.LibvirtURI}, o.Stderr, children)
		if err != nil {
			os.RemoveAll(sess.Root)
			log.Error("starting the reaper", "err", err)
			return launcherapi.ExitInternal
		}
		defer func() {
			if err := reaper.Done(); err != nil {
				log.Warn("stopping reaper", "err", err)
			}
		}()
	}
	defer func() {
		if sess.Root != "" {
			if err := os.RemoveAll(sess.Root); err != nil {
				log.Warn("removing per-VMI libvirt state", "root", sess.Root, "err", err)
			}
		}
	}()
	scratch, dropScratch, err := scratchDir(sess.Root, a.RuntimeDir)
	if err != nil {
		return usage("--runtime-dir", err)
	}
	defer dropScratch()
	conv, err := qemu.Convert(ctx, vmi, qemu.DomainOptions{Accel: accel, Images: images, ConsoleLog: consoleLog, ScratchDir: scratch, ClaimDir: a.ClaimDir})
	if err != nil {
		if images == nil {
			fmt.Fprintf(o.Stderr, "virt-launcher: %s: %v (image folder %s: not readable; build it with `make images` or pass --image-dir)\n", o.Input, err, a.ImageDir)
		} else {
			fmt.Fprintf(o.Stderr, "virt-launcher: %s: %v\n", o.Input, err)
		}
		return launcherapi.ExitInvalidManifest
	}
	dom := conv.Domain
	for _, note := range conv.Notes {
		log.Info(note)
	}

	seed := a.Seed
	if seed == 0 {
		seed = launcherapi.PickSeed()
	}
	qemuTimeout := a.StartTimeout.Draw(seed.Rand("qemu-timeout"))
	grace := 30 * time.Second
	if a.GracePeriod != nil {
		grace = *a.GracePeriod
	} else if vmi.Spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*vmi.Spec.TerminationGracePeriodSeconds) * time.Second
	}

	decisions := o.Plan.Decide(faults.DecideInput{Seed: seed, Key: vmi.Namespace + "/" + vmi.Name, Attempt: a.Attempt})
	hooks, err := HooksFor(decisions)
	if err == nil {
		built := &DomainEdit{Domain: dom, Scratch: scratch}
		if err = hooks.BuildDomain(built); err == nil {
			return start(ctx, o, launchPlan{dom: built, hooks: hooks, seed: seed, timeout: qemuTimeout, grace: grace,
				decisions: decisions, sess: sess, accel: string(accel), accelReason: why, consoleLog: consoleLog, libvirtLog: libvirtLog,
				ports: conv.Ports}, log)
		}
	}
	fmt.Fprintf(o.Stderr, "virt-launcher: %s: %v\n", o.Input, err)
	return launcherapi.ExitInvalidManifest
}

// launchPlan is what Launch prepared for the lifecycle.
type launchPlan struct {
	dom                    *DomainEdit
	hooks                  Hooks
	seed                   launcherapi.Seed
	timeout, grace         time.Duration
	decisions              faults.Decisions
	sess                   qemu.SessionOptions
	accel, accelReason     string
	consoleLog, libvirtLog string
	ports                  []qemu.PortForward
}

// start is the dry run, or the Scheduled event and the lifecycle.
func start(ctx context.Context, o Options, p launchPlan, log *slog.Logger) launcherapi.ExitCode {
	a, vmi := o.Args, o.VMI
	if a.DryRun {
		return dryRun(o.Stdout, vmi, p.dom.Domain, log)
	}
	events := NewEmitter(o.Stdout, a.EventFormat, launcherapi.Event{VMI: vmi.Name, Namespace: vmi.Namespace, UID: string(vmi.UID), Attempt: a.Attempt})
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
		"accel":              p.accel,
		"accelReason":        p.accelReason,
		"libvirt":            libvirtMode,
		"consoleLog":         p.consoleLog,
		"libvirtLog":         p.libvirtLog,
		"gracePeriod":        p.grace.String(),
		"faultPlan":          o.Plan.Summary(),
		"faults":             p.decisions.Summary(),
	}
	if err := events.Emit(launcherapi.Event{Time: clk.Now(), Event: launcherapi.EventScheduled, Phase: launcherapi.PhaseScheduled, Details: details}); err != nil {
		log.Error("writing event", "err", err)
	}

	// libvirt logs to stderr by default, including harmless errors of the
	// embedded driver; keep its log beside the console log instead, unless
	// the user routed it already.
	if os.Getenv("LIBVIRT_LOG_OUTPUTS") == "" {
		os.Setenv("LIBVIRT_LOG_OUTPUTS", "3:file:"+p.libvirtLog)
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
		Console:        watchConsole(clk, p.consoleLog, log),
		RunningDetails: runningDetails(p.ports),
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

// dryRun prints the VMI as it runs, KubeVirt's defaults applied, as a YAML
// document, then the domain XML.
func dryRun(out io.Writer, vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain, log *slog.Logger) launcherapi.ExitCode {
	doc, err := yaml.Marshal(vmi)
	if err != nil {
		log.Error("rendering the defaulted VMI", "err", err)
		return launcherapi.ExitInternal
	}
	xml, err := dom.Marshal()
	if err != nil {
		log.Error("rendering domain XML", "err", err)
		return launcherapi.ExitInternal
	}
	fmt.Fprintf(out, "---\n%s", doc)
	fmt.Fprintln(out, xml)
	return launcherapi.ExitSucceeded
}

// runningDetails are the Running event's details beyond its timing: the
// forwarded guest ports under "ports", when there are any.
func runningDetails(ports []qemu.PortForward) map[string]any {
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
