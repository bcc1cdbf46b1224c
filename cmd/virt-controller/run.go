package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// runFlags are the flags of "virt-controller run".
type runFlags struct {
	stateDir, launcher, output, preset, logLevel string
	instancetypes                                string
	launcherArgs, featureGates                   []string
	timeScale                                    float64
	seed                                         launcherapi.Seed
	maxDelay, giveUpWindow, countRunningWithin   time.Duration
	qemuTimeout, qemuJitter, watchInterval       time.Duration
	giveUpAfter, launcherNice                    int
	fsync, leaveRunning                          bool
}

func runController(args []string) error {
	var f runFlags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.StringVar(&f.stateDir, "state-dir", defaultStateDir(), "state folder (VM status, launcher folders, control socket)")
	fs.StringVar(&f.launcher, "launcher", "", "virt-launcher binary (default: next to virt-controller, then $PATH)")
	fs.IntVar(&f.launcherNice, "launcher-nice", 0, "run launchers (and their QEMU) at this nice value (0: the controller's own); a crowd of launchers outweighs the controller whatever their nice")
	fs.StringVar(&f.instancetypes, "instancetypes", "", "folder of the instancetypes and preferences VMs name, besides those in their own file (expanded with virt-launcher-expand, found next to virt-controller)")
	fs.StringSliceVar(&f.featureGates, "feature-gates", nil, "KubeVirt feature gates every virt-launcher gets, comma-separated: "+strings.Join(launcherapi.FeatureGateNames(), ", ")+" (hostDisk volumes and hook sidecars are refused without theirs)")
	fs.StringArrayVar(&f.launcherArgs, "launcher-arg", nil, "extra flag for every virt-launcher, e.g. --launcher-arg=--image-dir=DIR (repeatable)")
	fs.StringVarP(&f.output, "output", "o", "auto", "auto (live view on a terminal, JSON lines otherwise), live, json, or text (one readable line per event)")
	fs.Float64Var(&f.timeScale, "time-scale", 1, "multiply every controller-side duration (backoff, QEMU timeout, grace period) by this")
	fs.Var(&f.seed, "seed", "seed for every random draw (0: pick one and print it)")
	fs.StringVar(&f.preset, "backoff", "kubevirt", "backoff preset: "+strings.Join(backoff.PresetNames(), ", "))
	fs.DurationVar(&f.maxDelay, "max-delay", backoff.DefaultMaxDelay, "cap of the kubevirt backoff curve")
	fs.IntVar(&f.giveUpAfter, "give-up-after", 0, "stop retrying after this many counted failures (0: never)")
	fs.DurationVar(&f.giveUpWindow, "give-up-window", 0, "count only failures this recent for --give-up-after (0: all consecutive)")
	fs.DurationVar(&f.countRunningWithin, "count-running-failures-within", 0, "also count a VMI that ends within this long after reaching Running (0: upstream rule)")
	fs.DurationVar(&f.qemuTimeout, "qemu-timeout", launcherapi.DefaultStartTimeout.Base, "base QEMU start timeout passed to virt-launcher (scaled)")
	fs.DurationVar(&f.qemuJitter, "qemu-timeout-jitter", launcherapi.DefaultStartTimeout.Jitter, "the controller adds whole seconds in [0, this) to the timeout (scaled); the launcher adds none")
	fs.DurationVar(&f.watchInterval, "watch-interval", 250*time.Millisecond, "how often manifest files are checked for changes")
	fs.BoolVar(&f.fsync, "fsync", true, "fsync every state save (durable across a machine crash; a kill -9 needs only the atomic rename)")
	fs.BoolVar(&f.leaveRunning, "leave-running", false, "on SIGINT/SIGTERM leave VMIs running for the next controller to adopt, instead of stopping them")
	fs.StringVar(&f.logLevel, "log-level", "info", "stderr log level: debug, info, warn, error")
	extra := addExtraRunFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: virt-controller run [flags] VM.yaml...\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fail(exitBadInput, "%v", err)
	}
	if fs.NArg() == 0 {
		return fail(exitBadInput, "no VirtualMachine manifests given: usage: virt-controller run [flags] VM.yaml...")
	}
	cfg, err := f.config()
	if err != nil {
		return fail(exitBadInput, "%v", err)
	}
	manifests, err := controller.ReadManifests(context.Background(), cfg.Expander, fs.Args())
	if err != nil {
		return fail(exitBadInput, "%v", err)
	}
	var view *liveView
	if f.outputMode() == "live" {
		view = newLiveView(os.Stdout, cfg)
		cfg.Observer = view
	} else if f.output == "text" {
		cfg.Observer = &textLines{w: os.Stdout}
	} else {
		cfg.Observer = controller.NewJSONLines(os.Stdout)
	}
	finishTimeline, err := extra.apply(&cfg, f.maxDelay)
	if err != nil {
		return fail(exitBadInput, "%v", err)
	}
	defer finishTimeline()
	c, err := controller.New(cfg)
	if err != nil {
		return fail(exitBadInput, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if view != nil {
		go view.run(ctx, c)
	}
	fmt.Fprintf(os.Stderr, "virt-controller: seed %d (reproduce with --seed %d), time scale %g, policy %s, state %s\n",
		cfg.Seed, cfg.Seed, f.timeScale, cfg.Policy, f.stateDir)
	err = c.Run(ctx, manifests)
	if view != nil {
		view.final()
	}
	if err != nil {
		return fail(exitBadInput, "%v", err)
	}
	return nil
}

func (f runFlags) outputMode() string {
	if f.output != "auto" {
		return f.output
	}
	if st, err := os.Stdout.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		return "live"
	}
	return "json"
}

func (f runFlags) config() (controller.Config, error) {
	var cfg controller.Config
	switch f.output {
	case "auto", "live", "json", "text":
	default:
		return cfg, fmt.Errorf("--output %q: allowed values are auto, live, json, text", f.output)
	}
	if f.timeScale <= 0 {
		return cfg, fmt.Errorf("--time-scale %g: must be greater than 0", f.timeScale)
	}
	if err := launcherapi.ValidateFeatureGates(f.featureGates); err != nil {
		return cfg, err
	}
	policy, err := backoff.Preset(f.preset)
	if err != nil {
		return cfg, fmt.Errorf("--backoff: %w", err)
	}
	if f.preset == "kubevirt" {
		if f.maxDelay < time.Second {
			return cfg, fmt.Errorf("--max-delay %s: must be at least 1s", f.maxDelay)
		}
		policy.Curve = backoff.KubeVirt{MaxDelay: f.maxDelay}
	}
	if f.giveUpAfter < 0 || f.giveUpWindow < 0 || f.countRunningWithin < 0 {
		return cfg, errors.New("--give-up-after, --give-up-window and --count-running-failures-within must not be negative")
	}
	if f.giveUpAfter > 0 {
		policy.GiveUpAfter, policy.GiveUpWindow = f.giveUpAfter, f.giveUpWindow
	}
	if f.countRunningWithin > 0 {
		policy.CountRunningFailuresWithin = f.countRunningWithin
	}
	policy.Scale = f.timeScale
	if f.launcherNice < 0 || f.launcherNice > 19 {
		return cfg, fmt.Errorf("--launcher-nice %d: allowed values are 0 to 19", f.launcherNice)
	}
	timeout := launcherapi.StartTimeout{Base: f.qemuTimeout, Jitter: f.qemuJitter}
	if err := timeout.Validate(); err != nil {
		return cfg, err
	}
	level := slog.LevelInfo
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cfg, fmt.Errorf("--log-level %q: allowed values are debug, info, warn, error", f.logLevel)
	}
	launcher, err := findLauncher(f.launcher)
	if err != nil {
		return cfg, err
	}
	expander, err := newExpander(f.instancetypes)
	if err != nil {
		return cfg, err
	}
	seed := f.seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = launcherapi.Seed(binary.LittleEndian.Uint64(b[:])>>1 | 1)
	}
	var logOut io.Writer = os.Stderr
	cfg = controller.Config{
		StateDir: f.stateDir, Fsync: f.fsync, Policy: policy, Seed: seed,
		Launcher:      controller.LauncherOptions{Path: launcher, Args: f.launcherArgs, Nice: f.launcherNice, FeatureGates: f.featureGates},
		StartTimeout:  timeout,
		WatchInterval: f.watchInterval, StopOnExit: !f.leaveRunning,
		Logger:   slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		Expander: expander,
	}
	return cfg, nil
}

// newExpander is virt-launcher-expand next to this binary (as the
// launcher's converter stage finds it next to its own), with the
// --instancetypes folder. A missing expander is an error only when a VM
// names an instancetype or a preference.
func newExpander(dir string) (vmexpandexec.Expander, error) {
	self, err := os.Executable()
	if err != nil {
		return vmexpandexec.Expander{}, fmt.Errorf("finding %s next to virt-controller: %w", vmexpandexec.ExpanderName, err)
	}
	if dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return vmexpandexec.Expander{}, fmt.Errorf("--instancetypes %s: want a folder of instancetype and preference manifests", dir)
		}
	}
	return vmexpandexec.Expander{Exe: filepath.Join(filepath.Dir(self), vmexpandexec.ExpanderName), Dir: dir}, nil
}

// findLauncher resolves --launcher, or looks next to this binary, then in
// $PATH.
func findLauncher(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "virt-launcher")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("virt-launcher")
	if err != nil {
		return "", errors.New("virt-launcher not found next to virt-controller nor in $PATH; pass --launcher PATH")
	}
	return p, nil
}
