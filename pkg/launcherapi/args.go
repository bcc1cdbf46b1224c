package launcherapi

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Values of --accel.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Values of --pod-network.
const (
	// PodNetworkUser is QEMU's user-mode network, the default: the
	// launcher alone, with no pod network set up beside it.
	PodNetworkUser = "user"
	// PodNetworkKubeVirtTap plugs the pod network's interface into the
	// tap device KubeVirt's virt-handler made in the pod's network
	// namespace (tap0 for the masquerade and bridge bindings), as
	// KubeVirt's launcher does: libvirt's ethernet interface, managed='no'.
	PodNetworkKubeVirtTap = "kubevirt-tap"
)

// KubeVirt's feature gates that the launcher honours, by KubeVirt's names
// (pkg/virt-config/featuregate): --feature-gates takes them comma-separated.
// As in KubeVirt, a VMI with a hostDisk volume or hook sidecars is refused
// unless its gate is on.
const (
	// GateHostDisk allows hostDisk volumes.
	GateHostDisk = "HostDisk"
	// GateSidecar allows the hooks.kubevirt.io/hookSidecars annotation.
	GateSidecar = "Sidecar"
)

// FeatureGateNames lists the gates --feature-gates takes.
func FeatureGateNames() []string { return []string{GateHostDisk, GateSidecar} }

// ValidateFeatureGates refuses a gate name the launcher does not know,
// naming the ones it does (for the launcher's and the controller's
// --feature-gates).
func ValidateFeatureGates(gates []string) error {
	for _, g := range gates {
		if !slices.Contains(FeatureGateNames(), g) {
			return fmt.Errorf("--feature-gates: unknown feature gate %.200q: allowed values are %s", g, strings.Join(FeatureGateNames(), ", "))
		}
	}
	return nil
}

// Values of --event-format.
const (
	FormatJSON = "json"
	FormatText = "text"
)

// Defaults of the launcher's folders.
const (
	DefaultRuntimeDir  = "/run/crashloop"
	DefaultCacheDir    = "/var/cache/crashloop/qemu-capabilities"
	DefaultConsoleDir  = "/var/log/crashloop"
	DefaultReadyMarker = "HARNESS-GUEST-READY"
)

// Args is virt-launcher's command line as data. A runner fills the fields
// it cares about and calls Build; the launcher calls ParseArgs. In Build a
// zero field means "the launcher's default" and is left off the command
// line; ParseArgs fills every field with its effective value.
type Args struct {
	// Manifest is the VMI file (YAML or JSON); "-" reads stdin.
	Manifest string
	// Accel is auto, kvm or tcg.
	Accel string
	// LibvirtURI connects to an existing libvirt daemon instead of the
	// embedded driver.
	LibvirtURI string
	// RuntimeDir is the parent of the per-VMI embedded libvirt root.
	RuntimeDir string
	// CacheDir is the QEMU capability cache shared between launches.
	CacheDir string
	// ImageDir resolves containerDisk and kernelBoot images (images.json).
	ImageDir string
	// ContainerDiskDir is KubeVirt's container-disks folder of a launcher
	// pod (/var/run/kubevirt/container-disks), where virt-handler
	// bind-mounts each containerDisk volume as disk_N.img (N its index in
	// spec.volumes) and the kernel-boot files under kernel-boot/. A file
	// found there is used instead of ImageDir's.
	ContainerDiskDir string
	// ConsoleLog is the guest's serial console file.
	ConsoleLog string
	// PodNetwork is how the pod network's interface is plugged in: user
	// (empty: the default) or kubevirt-tap.
	PodNetwork string
	// ReadyMarker is the console text that means the guest is ready.
	ReadyMarker string
	// StartTimeout is the QEMU start timeout; a runner that has drawn it
	// already passes FixedStartTimeout(d), which Build renders with a zero
	// jitter.
	StartTimeout StartTimeout
	// GracePeriod is the graceful stop time on SIGTERM; nil means the
	// VMI's terminationGracePeriodSeconds, else 30 s.
	GracePeriod *time.Duration
	// Seed seeds every draw; zero picks one.
	Seed Seed
	// Attempt is the VM's launch attempt, 1-based; zero means 1.
	Attempt int
	// EventFormat is json or text.
	EventFormat string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// SimulateCrash makes the launcher panic at once (KubeVirt's test hook).
	SimulateCrash bool
	// DryRun prints the domain instead of starting it.
	DryRun bool
	// Faults are --fault values, NAME[=TERM].
	Faults []string
	// Extra are further arguments put before the manifest, verbatim (a
	// runner's pass-through flags).
	Extra []string
	// ClaimDir holds the persistentVolumeClaim and dataVolume volumes in
	// KubeVirt's file-system PVC layout: claim NAME is ClaimDir/NAME/disk.img.
	// Empty refuses such volumes.
	ClaimDir string
	// Instancetypes is a folder of YAML or JSON files with the
	// (Cluster)Instancetype and (Cluster)Preference objects a
	// VirtualMachine may name, beside those in the manifest's own file.
	Instancetypes string
	// HookSidecars is KubeVirt mode's count of the launcher pod's hook
	// sidecars, which already serve in /var/run/kubevirt-hooks; 0 (direct
	// mode) starts the sidecars the VMI's hooks.kubevirt.io/hookSidecars
	// annotation names.
	HookSidecars uint
	// FeatureGates are the KubeVirt feature gates switched on (GateHostDisk,
	// GateSidecar), as a cluster's KubeVirt CR lists them.
	FeatureGates []string
}

// GateEnabled tells whether --feature-gates names the gate.
func (a Args) GateEnabled(gate string) bool {
	return slices.Contains(a.FeatureGates, gate)
}

// DefaultArgs are the effective values of every flag left off.
func DefaultArgs() Args {
	return Args{
		Accel:        AccelAuto,
		PodNetwork:   PodNetworkUser,
		RuntimeDir:   DefaultRuntimeDir,
		CacheDir:     DefaultCacheDir,
		ReadyMarker:  DefaultReadyMarker,
		StartTimeout: DefaultStartTimeout,
		Attempt:      1,
		EventFormat:  FormatJSON,
		LogLevel:     "info",
	}
}

// Build renders the command line (without the program name), flags first
// and the manifest last.
func (a Args) Build() []string {
	var out []string
	str := func(flag, v string) {
		if v != "" {
			out = append(out, flag, v)
		}
	}
	str("--accel", a.Accel)
	str("--libvirt-uri", a.LibvirtURI)
	str("--runtime-dir", a.RuntimeDir)
	str("--cache-dir", a.CacheDir)
	str("--image-dir", a.ImageDir)
	str("--container-disk-dir", a.ContainerDiskDir)
	str("--console-log", a.ConsoleLog)
	str("--pod-network", a.PodNetwork)
	str("--ready-marker", a.ReadyMarker)
	if a.StartTimeout != (StartTimeout{}) {
		out = append(out, "--qemu-timeout", FormatDuration(a.StartTimeout.Base),
			"--qemu-timeout-jitter", FormatDuration(a.StartTimeout.Jitter))
	}
	if a.GracePeriod != nil {
		out = append(out, "--grace-period", FormatDuration(*a.GracePeriod))
	}
	if a.Seed != 0 {
		out = append(out, "--seed", a.Seed.String())
	}
	if a.Attempt != 0 {
		out = append(out, "--attempt", strconv.Itoa(a.Attempt))
	}
	str("--event-format", a.EventFormat)
	str("--log-level", a.LogLevel)
	if a.SimulateCrash {
		out = append(out, "--simulate-crash")
	}
	if a.DryRun {
		out = append(out, "--dry-run")
	}
	for _, f := range a.Faults {
		out = append(out, "--fault", f)
	}
	str("--claim-dir", a.ClaimDir)
	str("--instancetypes", a.Instancetypes)
	if a.HookSidecars != 0 {
		out = append(out, "--hook-sidecars", strconv.FormatUint(uint64(a.HookSidecars), 10))
	}
	if len(a.FeatureGates) > 0 {
		out = append(out, "--feature-gates", strings.Join(a.FeatureGates, ","))
	}
	out = append(out, a.Extra...)
	if a.Manifest != "" {
		out = append(out, a.Manifest)
	}
	return out
}

// UsageError is a bad launcher command line (exit code ExitUsage).
type UsageError struct{ Err error }

// Error implements error.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// FlagSet binds every launcher flag to a, with a's current values as the
// defaults (start from DefaultArgs). Usage text goes to out.
func (a *Args) FlagSet(out io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("virt-launcher", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = true
	fs.StringVar(&a.Accel, "accel", a.Accel, "accelerator: auto (KVM only with hardware virtualization and kvm_intel/kvm_amd loaded, else TCG), kvm, tcg")
	fs.StringVar(&a.LibvirtURI, "libvirt-uri", a.LibvirtURI, "connect to this libvirt daemon instead of running libvirt's embedded QEMU driver")
	fs.StringVar(&a.RuntimeDir, "runtime-dir", a.RuntimeDir, "parent of the per-VMI embedded libvirt state, removed on exit")
	fs.StringVar(&a.CacheDir, "cache-dir", a.CacheDir, "QEMU capability cache shared between launches (empty: no cache)")
	fs.StringVar(&a.ImageDir, "image-dir", a.ImageDir, "image folder resolving containerDisk and kernelBoot container images (its images.json lists them)")
	fs.StringVar(&a.ContainerDiskDir, "container-disk-dir", a.ContainerDiskDir, "KubeVirt mode: the launcher pod's container-disks folder, where virt-handler bind-mounts containerDisk volume N as disk_N.img and the kernel-boot files under kernel-boot/; a file found there is used instead of the image folder's")
	fs.StringVar(&a.PodNetwork, "pod-network", a.PodNetwork, "how the pod network's interface is plugged in: user (QEMU's user-mode network) or kubevirt-tap (the tap0 KubeVirt's virt-handler made in the pod's network namespace, as KubeVirt's launcher plugs it)")
	fs.StringVar(&a.ConsoleLog, "console-log", a.ConsoleLog, "file the serial console is written to (default "+DefaultConsoleDir+"/<namespace>_<name>_<uid>.console.log)")
	fs.StringVar(&a.ReadyMarker, "ready-marker", a.ReadyMarker, "console text that means the guest is ready (GuestReady event); empty disables")
	fs.DurationVar(&a.StartTimeout.Base, "qemu-timeout", a.StartTimeout.Base, "base of the QEMU start timeout")
	fs.DurationVar(&a.StartTimeout.Jitter, "qemu-timeout-jitter", a.StartTimeout.Jitter, "the start timeout is base + uniform[0, jitter), in whole seconds when jitter is 1s or more")
	fs.Var(&optionalDuration{p: &a.GracePeriod}, "grace-period", "graceful stop time on SIGTERM/SIGINT before destroy (default: the VMI's terminationGracePeriodSeconds, else 30s)")
	fs.Var(&a.Seed, "seed", "seed for every random draw (start timeout jitter, fault decisions); 0 picks one and reports it in the Scheduled event")
	fs.IntVar(&a.Attempt, "attempt", a.Attempt, "launch attempt of this VM (1-based), set by the controller; faults can target attempts")
	fs.StringVar(&a.EventFormat, "event-format", a.EventFormat, "event stream format on stdout: json (one object per line) or text (for people)")
	fs.StringVar(&a.LogLevel, "log-level", a.LogLevel, "log level on stderr: debug, info, warn, error")
	fs.BoolVar(&a.SimulateCrash, "simulate-crash", a.SimulateCrash, "panic at once, before libvirt or QEMU (KubeVirt's crash-loop test hook)")
	fs.BoolVar(&a.DryRun, "dry-run", a.DryRun, "print the VMI with KubeVirt's defaults applied (a YAML document) and the libvirt domain XML (faults applied) to stdout and exit without starting anything")
	fs.StringArrayVar(&a.Faults, "fault", a.Faults, "inject a fault: NAME[=TERM] (repeatable; see the fault table in the README)")
	fs.StringVar(&a.ClaimDir, "claim-dir", a.ClaimDir, "folder of persistentVolumeClaim and dataVolume volumes: claim NAME is DIR/NAME/disk.img (empty: such volumes are refused)")
	fs.StringVar(&a.Instancetypes, "instancetypes", a.Instancetypes, "folder of YAML/JSON files with the (Cluster)Instancetype and (Cluster)Preference objects a VirtualMachine may name (the manifest's own file is read first)")
	fs.UintVar(&a.HookSidecars, "hook-sidecars", a.HookSidecars, "KubeVirt mode: wait for N hook sidecars of the launcher pod in /var/run/kubevirt-hooks (0: start the sidecars the VMI's hooks.kubevirt.io/hookSidecars annotation names)")
	fs.StringSliceVar(&a.FeatureGates, "feature-gates", a.FeatureGates, "KubeVirt feature gates to switch on, comma-separated, by KubeVirt's names: "+strings.Join(FeatureGateNames(), ", ")+" (without HostDisk a hostDisk volume is refused, without Sidecar the hooks.kubevirt.io/hookSidecars annotation)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: virt-launcher [flags] VMI.yaml\n\nBoots one KubeVirt VirtualMachineInstance (YAML or JSON file, - for stdin) through libvirt.\n\nFlags:\n%s", fs.FlagUsages())
	}
	return fs
}

// ParseArgs parses a launcher command line (without the program name) on
// top of base (DefaultArgs, with a runner's own defaults) and validates it.
// pflag.ErrHelp is returned as is after the usage text went to out; any
// other error is a *UsageError naming the flag and what is allowed.
func ParseArgs(argv []string, base Args, out io.Writer) (Args, error) {
	a := base
	fs := a.FlagSet(out)
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return a, err
		}
		return a, &UsageError{err}
	}
	switch fs.NArg() {
	case 1:
		a.Manifest = fs.Arg(0)
	case 0:
		return a, &UsageError{errors.New("missing the VMI manifest argument (usage: virt-launcher [flags] VMI.yaml)")}
	default:
		return a, &UsageError{fmt.Errorf("want one VMI manifest, got %d arguments: %v", fs.NArg(), fs.Args())}
	}
	if err := a.Validate(); err != nil {
		return a, &UsageError{err}
	}
	return a, nil
}

// Validate checks every field's value and names the flag at fault.
func (a Args) Validate() error {
	switch a.Accel {
	case AccelAuto, AccelKVM, AccelTCG:
	default:
		return fmt.Errorf("--accel: unknown accelerator %q: allowed values are auto, kvm, tcg", a.Accel)
	}
	switch a.PodNetwork {
	case "", PodNetworkUser, PodNetworkKubeVirtTap:
	default:
		return fmt.Errorf("--pod-network: unknown value %q: allowed values are %s, %s", a.PodNetwork, PodNetworkUser, PodNetworkKubeVirtTap)
	}
	if err := a.StartTimeout.Validate(); err != nil {
		return err
	}
	if a.GracePeriod != nil && *a.GracePeriod < 0 {
		return fmt.Errorf("--grace-period must not be negative, got %v", *a.GracePeriod)
	}
	if a.Attempt < 1 {
		return fmt.Errorf("--attempt must be 1 or more, got %d", a.Attempt)
	}
	if a.EventFormat != FormatJSON && a.EventFormat != FormatText {
		return fmt.Errorf("--event-format: unknown format %q: allowed values are json, text", a.EventFormat)
	}
	if _, err := ParseLogLevel(a.LogLevel); err != nil {
		return err
	}
	if err := ValidateFeatureGates(a.FeatureGates); err != nil {
		return err
	}
	if a.Instancetypes != "" {
		if fi, err := os.Stat(a.Instancetypes); err != nil || !fi.IsDir() {
			return fmt.Errorf("--instancetypes %s: want a folder of YAML or JSON files with instancetypes and preferences", a.Instancetypes)
		}
	}
	return nil
}

// ParseLogLevel reads --log-level.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level: unknown level %q: allowed values are debug, info, warn, error", s)
	}
	return l, nil
}

// optionalDuration is a pflag.Value for a duration that may be absent.
type optionalDuration struct{ p **time.Duration }

func (o *optionalDuration) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return (**o.p).String()
}

func (o *optionalDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	*o.p = &d
	return nil
}

func (o *optionalDuration) Type() string { return "duration" }
