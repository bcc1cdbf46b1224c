// Command virt-launcher boots one KubeVirt VirtualMachineInstance as a real
// QEMU VM through libvirt, reports its phases as JSON lines on stdout and
// ends with a documented exit code (see pkg/launcher). It is one process
// per VMI, like KubeVirt's virt-launcher in its pod.
//
//	virt-launcher [flags] VMI.yaml
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcher"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == launcher.ReaperFlag {
		log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "reaper")
		os.Exit(launcher.RunReaper(os.Stdin, os.Args[2:], log))
	}
	os.Exit(int(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)))
}

// options are the parsed command line.
type options struct {
	manifest      string
	accel         string
	libvirtURI    string
	runtimeDir    string
	cacheDir      string
	imageDir      string
	consoleLog    string
	readyMarker   string
	qemuTimeout   time.Duration
	timeoutJitter time.Duration
	gracePeriod   time.Duration
	seed          int64
	attempt       int
	eventFormat   string
	logLevel      string
	simulateCrash bool
	dryRun        bool
	faults        []string
}

func newFlagSet(o *options, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("virt-launcher", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = true
	fs.StringVar(&o.accel, "accel", "auto", "accelerator: auto (KVM only with hardware virtualization and kvm_intel/kvm_amd loaded, else TCG), kvm, tcg")
	fs.StringVar(&o.libvirtURI, "libvirt-uri", "", "connect to this libvirt daemon instead of running libvirt's embedded QEMU driver")
	fs.StringVar(&o.runtimeDir, "runtime-dir", "/run/crashloop", "parent of the per-VMI embedded libvirt state, removed on exit")
	fs.StringVar(&o.cacheDir, "cache-dir", "/var/cache/crashloop/qemu-capabilities", "QEMU capability cache shared between launches (empty: no cache)")
	fs.StringVar(&o.imageDir, "image-dir", defaultImageDir(), "image folder resolving containerDisk and kernelBoot container images (its images.json lists them)")
	fs.StringVar(&o.consoleLog, "console-log", "", "file the serial console is written to (default /var/log/crashloop/<namespace>_<name>_<uid>.console.log)")
	fs.StringVar(&o.readyMarker, "ready-marker", "HARNESS-GUEST-READY", "console text that means the guest is ready (GuestReady event); empty disables")
	fs.DurationVar(&o.qemuTimeout, "qemu-timeout", 4*time.Minute, "base of the QEMU start timeout")
	fs.DurationVar(&o.timeoutJitter, "qemu-timeout-jitter", 2*time.Minute, "the start timeout is base + uniform[0, jitter)")
	fs.DurationVar(&o.gracePeriod, "grace-period", -1, "graceful stop time on SIGTERM/SIGINT before destroy (default: the VMI's terminationGracePeriodSeconds, else 30s)")
	fs.Int64Var(&o.seed, "seed", 0, "seed for every random draw (start timeout jitter, fault decisions); 0 picks one and reports it in the Scheduled event")
	fs.IntVar(&o.attempt, "attempt", 1, "launch attempt of this VM (1-based), set by the controller; faults can target attempts")
	fs.StringVar(&o.eventFormat, "event-format", "json", "event stream format on stdout: json (one object per line) or text (for people)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	fs.BoolVar(&o.simulateCrash, "simulate-crash", false, "panic at once, before libvirt or QEMU (KubeVirt's crash-loop test hook)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the libvirt domain XML (faults applied) to stdout and exit without starting anything")
	fs.StringArrayVar(&o.faults, "fault", nil, "inject a fault: NAME[=TERM] (repeatable; see the fault table in the README)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: virt-launcher [flags] VMI.yaml\n\nBoots one KubeVirt VirtualMachineInstance (YAML or JSON file, - for stdin) through libvirt.\n\nFlags:\n%s", fs.FlagUsages())
	}
	return fs
}

// defaultImageDir is <dir of the binary>/../images: _build/images next to
// _build/bin in a checkout, /usr/share/crashloop/images beside /usr/bin.
func defaultImageDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "images"
	}
	dir := filepath.Dir(filepath.Dir(exe))
	if filepath.Base(filepath.Dir(exe)) == "bin" && dir == "/usr" {
		return "/usr/share/crashloop/images"
	}
	return filepath.Join(dir, "images")
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) launcher.ExitCode {
	var o options
	fs := newFlagSet(&o, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return launcher.ExitSucceeded
		}
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcher.ExitUsage
	}
	log, err := newLogger(o.logLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcher.ExitUsage
	}
	if o.simulateCrash {
		// KubeVirt's semantics: right after flags and logging, before
		// anything else exists.
		log.Info("--simulate-crash given: crashing before libvirt or QEMU")
		panic("Simulated virt-launcher crash")
	}
	if err := checkFlags(&o, fs); err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcher.ExitUsage
	}

	data, input, err := manifest.ReadFile(o.manifest, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcher.ExitInputUnreadable
	}
	vmi, doc, err := manifest.VMI(data, input)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcher.ExitInvalidManifest
	}
	if faults.WantsSimulatedCrash(vmi.Annotations) {
		log.Info("VMI carries " + faults.FailFastAnnotation + ": crashing before libvirt or QEMU")
		panic("Simulated virt-launcher crash")
	}
	if err := qemu.CheckSupported(doc.Raw); err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", input, err)
		return launcher.ExitInvalidManifest
	}
	plan, err := faults.Parse(vmi.Annotations, o.faults)
	if err == nil {
		err = plan.ValidateDisks(diskNames(vmi))
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", input, err)
		if onlyFlagErrors(err) {
			return launcher.ExitUsage
		}
		return launcher.ExitInvalidManifest
	}
	return launch(context.Background(), &o, vmi, plan, input, stdout, log)
}

// onlyFlagErrors tells whether every fault error came from --fault flags
// (a usage error) rather than from the manifest's annotations.
func onlyFlagErrors(err error) bool {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	for _, e := range list {
		var fe *faults.Error
		if !errors.As(e, &fe) || !strings.HasPrefix(fe.Source, "--fault") {
			return false
		}
	}
	return true
}

func checkFlags(o *options, fs *pflag.FlagSet) error {
	switch fs.NArg() {
	case 1:
		o.manifest = fs.Arg(0)
	case 0:
		return &usageError{"missing the VMI manifest argument (usage: virt-launcher [flags] VMI.yaml)"}
	default:
		return &usageError{fmt.Sprintf("want one VMI manifest, got %d arguments: %v", fs.NArg(), fs.Args())}
	}
	if _, err := qemu.ParseAccel(o.accel); err != nil {
		return fmt.Errorf("--accel: %w", err)
	}
	if err := launcher.ValidateTimeout(o.qemuTimeout, o.timeoutJitter); err != nil {
		return err
	}
	if fs.Changed("grace-period") && o.gracePeriod < 0 {
		return fmt.Errorf("--grace-period must not be negative, got %v", o.gracePeriod)
	}
	if o.attempt < 1 {
		return fmt.Errorf("--attempt must be 1 or more, got %d", o.attempt)
	}
	if o.eventFormat != string(launcher.FormatJSON) && o.eventFormat != string(launcher.FormatText) {
		return fmt.Errorf("--event-format: unknown format %q: allowed values are json, text", o.eventFormat)
	}
	return nil
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: unknown level %q: allowed values are debug, info, warn, error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func launch(ctx context.Context, o *options, vmi *v1.VirtualMachineInstance, plan faults.Plan, input string, stdout io.Writer, log *slog.Logger) launcher.ExitCode {
	log = log.With("vmi", vmi.Namespace+"/"+vmi.Name)
	// SIGTERM/SIGINT from here on ask for a graceful stop, even while the
	// launch is still being set up, instead of killing the process halfway.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	mode, _ := qemu.ParseAccel(o.accel)
	host, err := qemu.ReadHostVirt()
	if err != nil && mode == qemu.AccelAuto {
		log.Warn("could not read the host's virtualization support", "err", err)
	}
	accel, why := qemu.ChooseAccel(mode, host)
	log.Info("accelerator: "+why, "accel", accel)

	images, err := qemu.OpenImageStore(o.imageDir)
	if err != nil {
		images = nil
		log.Debug("no image folder", "err", err)
	}
	consoleLog := o.consoleLog
	if consoleLog == "" {
		consoleLog = filepath.Join("/var/log/crashloop", fmt.Sprintf("%s_%s_%s.console.log", vmi.Namespace, vmi.Name, vmi.UID))
	}
	libvirtLog := strings.TrimSuffix(consoleLog, ".log") + ".libvirt.log"
	if err := os.MkdirAll(filepath.Dir(consoleLog), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher: --console-log: %v\n", err)
		return launcher.ExitUsage
	}
	sess := qemu.SessionOptions{URI: o.libvirtURI, CapsCacheDir: o.cacheDir}
	if o.libvirtURI == "" {
		if err := os.MkdirAll(o.runtimeDir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "virt-launcher: --runtime-dir: %v\n", err)
			return launcher.ExitUsage
		}
		root, err := os.MkdirTemp(o.runtimeDir, "vmi-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "virt-launcher: --runtime-dir: %v\n", err)
			return launcher.ExitUsage
		}
		sess.Root = root
	}
	// The reaper comes first: whatever happens to this process from now on,
	// it removes the per-VMI folder and any QEMU of the domain.
	if !o.dryRun {
		exe, err := os.Executable()
		if err != nil {
			os.RemoveAll(sess.Root)
			log.Error("cannot find own executable for the reaper", "err", err)
			return launcher.ExitInternal
		}
		reaper, err := launcher.StartReaper(exe, launcher.ReaperTarget{Domain: qemu.DomainName(vmi), Root: sess.Root, URI: o.libvirtURI})
		if err != nil {
			os.RemoveAll(sess.Root)
			log.Error("starting the reaper", "err", err)
			return launcher.ExitInternal
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
	scratch, dropScratch, err := scratchDir(sess.Root, o.runtimeDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher: --runtime-dir: %v\n", err)
		return launcher.ExitUsage
	}
	defer dropScratch()
	dom, err := qemu.BuildDomain(vmi, qemu.DomainOptions{Accel: accel, Images: images, ConsoleLog: consoleLog, ScratchDir: scratch})
	if err != nil {
		if images == nil {
			fmt.Fprintf(os.Stderr, "virt-launcher: %s: %v (image folder %s: not readable; build it with `make images` or pass --image-dir)\n", input, err, o.imageDir)
		} else {
			fmt.Fprintf(os.Stderr, "virt-launcher: %s: %v\n", input, err)
		}
		return launcher.ExitInvalidManifest
	}

	seed := o.seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	qemuTimeout := launcher.DrawTimeout(o.qemuTimeout, o.timeoutJitter, launcher.Rand(seed, "qemu-timeout"))
	grace := o.gracePeriod
	if grace < 0 {
		grace = 30 * time.Second
		if vmi.Spec.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*vmi.Spec.TerminationGracePeriodSeconds) * time.Second
		}
	}

	decisions := plan.Decide(faults.DecideInput{Seed: seed, Key: vmi.Namespace + "/" + vmi.Name, Attempt: o.attempt})
	injections, err := applyFaults(decisions, dom, scratch)
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher: %s: %v\n", input, err)
		return launcher.ExitInvalidManifest
	}
	if o.dryRun {
		xml, err := dom.Marshal()
		if err != nil {
			log.Error("rendering domain XML", "err", err)
			return launcher.ExitInternal
		}
		fmt.Fprintln(stdout, xml)
		return launcher.ExitSucceeded
	}
	format := launcher.Format(o.eventFormat)
	events := launcher.NewEmitter(stdout, format, launcher.Event{VMI: vmi.Name, Namespace: vmi.Namespace, UID: string(vmi.UID), Attempt: o.attempt})
	libvirtMode := "embedded:" + sess.Root
	if o.libvirtURI != "" {
		libvirtMode = o.libvirtURI
	}
	clk := clock.RealClock{}
	details := map[string]any{
		"qemuTimeout":        qemuTimeout.String(),
		"qemuTimeoutSeconds": qemuTimeout.Seconds(),
		"qemuTimeoutBase":    o.qemuTimeout.String(),
		"qemuTimeoutJitter":  o.timeoutJitter.String(),
		"seed":               seed,
		"accel":              string(accel),
		"accelReason":        why,
		"libvirt":            libvirtMode,
		"consoleLog":         consoleLog,
		"libvirtLog":         libvirtLog,
		"gracePeriod":        grace.String(),
		"faultPlan":          plan.Summary(),
		"faults":             decisions.Summary(),
	}
	if err := events.Emit(launcher.Event{Time: clk.Now(), Event: launcher.EventScheduled, Phase: launcher.PhaseScheduled, Details: details}); err != nil {
		log.Error("writing event", "err", err)
	}

	loopCtx, stopLoop := context.WithCancel(context.Background())
	defer stopLoop()
	// libvirt logs to stderr by default, including harmless errors of the
	// embedded driver; keep its log beside the console log instead, unless
	// the user routed it already.
	if os.Getenv("LIBVIRT_LOG_OUTPUTS") == "" {
		os.Setenv("LIBVIRT_LOG_OUTPUTS", "3:file:"+libvirtLog)
	}
	if err := launcher.BecomeSubreaper(); err != nil {
		log.Warn("QEMU's exit may be noticed late", "err", err)
	}
	if err := qemu.StartEventLoop(loopCtx); err != nil {
		log.Error("starting libvirt's event loop", "err", err)
		return launcher.ExitInternal
	}
	res := launcher.Run(ctx, launcher.Config{
		VMI:         vmi,
		Domain:      dom,
		Session:     sess,
		ConsoleLog:  consoleLog,
		ReadyMarker: o.readyMarker,
		QemuTimeout: qemuTimeout,
		GracePeriod: grace,
		Injections:  injections,
		Clock:       clk,
		Events:      events,
		Log:         log,
	})
	log.Info("launch ended", "phase", res.Phase, "reason", res.Reason, "exitCode", int(res.ExitCode))
	return res.ExitCode
}
