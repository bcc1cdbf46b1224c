package monitor

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
)

// Flags is the compute container's command line as virt-controller
// renders it (pkg/virt-controller/services/template.go) in KubeVirt
// v1.6.x, v1.7.x (the same flags), v1.8.x (adds --hypervisor, always, and
// the feature-gated --libvirt-hook-server-and-client and
// --upgrade-ordinal-ifaces), v1.9.0 and main (add the feature-gated
// --vgpu-dedicated-hook, --vm-stats-collector, --firmware-auto-selection and
// --allow-cross-arch-emulation; main drops --libvirt-hook-server-and-client
// and renders the flags as the container's args after its command, which
// the process sees as one argv), plus the flags of ours that say where our
// launcher is.
type Flags struct {
	// QemuTimeout is --qemu-timeout: virt-controller's jittered start
	// timeout ("263s").
	QemuTimeout time.Duration
	// Name, UID and Namespace identify the VMI.
	Name, UID, Namespace string
	// ShareDir is --kubevirt-share-dir (/var/run/kubevirt): the notify
	// socket and sockets/ live there.
	ShareDir string
	// EphemeralDiskDir, HotplugDiskDir: KubeVirt's disk folders (accepted;
	// our launcher keeps its files in its own root).
	EphemeralDiskDir, HotplugDiskDir string
	// ContainerDiskDir is where virt-handler bind-mounts the pod's
	// containerDisks (disk_N.img) and kernel-boot files (kernel-boot/):
	// our launcher's --container-disk-dir.
	ContainerDiskDir string
	// GracePeriodSeconds is the graceful stop time on SIGTERM.
	GracePeriodSeconds int
	// HookSidecars is the number of the pod's hook sidecar containers: the
	// launcher waits for their sockets in /var/run/kubevirt-hooks and runs
	// their hooks after its converter (virt-launcher-hooks).
	HookSidecars uint
	// OVMFPath, DiskMemoryLimit, LibvirtLogFilters, RunAsNonRoot,
	// ImageVolume: accepted as KubeVirt's launcher accepts them.
	OVMFPath          string
	DiskMemoryLimit   int64
	LibvirtLogFilters string
	RunAsNonRoot      bool
	ImageVolume       bool
	// AllowEmulation lets the launcher fall back to TCG (--accel auto);
	// without it the launcher asks for KVM (--accel kvm).
	AllowEmulation bool
	// KeepAfterFailure keeps the process alive after a failure.
	KeepAfterFailure bool
	// SimulateCrash panics at once, as KubeVirt's launcher does.
	SimulateCrash bool
	// Hypervisor is --hypervisor (v1.8.0 and later): the cluster's
	// hypervisor. Only HypervisorKVM is taken (empty means it too, as in
	// KubeVirt's launcher); anything else is refused.
	Hypervisor string
	// LibvirtHookServerAndClient, UpgradeOrdinalIfaces, VGPUDedicatedHook,
	// VMStatsCollector, FirmwareAutoSelection and AllowCrossArchEmulation
	// are KubeVirt's feature-gated launcher flags (v1.8.0 and later; see
	// ignoredFeatures): taken, and said in the log, since this launcher
	// does not have their features.
	LibvirtHookServerAndClient bool
	UpgradeOrdinalIfaces       bool
	VGPUDedicatedHook          bool
	VMStatsCollector           bool
	FirmwareAutoSelection      bool
	AllowCrossArchEmulation    bool

	// Launcher is our launcher's front (--crashloop-launcher).
	Launcher string
	// ImageDir is our launcher's --image-dir (--crashloop-image-dir); empty
	// is its default.
	ImageDir string
	// LogLevel is our log level (--crashloop-log-level).
	LogLevel string
}

// ParseFlags parses argv (without the program name). Unknown flags are an
// error naming them: virt-controller renders only the flags above.
func ParseFlags(argv []string, out io.Writer) (Flags, error) {
	var f Flags
	fs := pflag.NewFlagSet("virt-launcher-monitor", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&f.QemuTimeout, "qemu-timeout", 5*time.Minute, "time QEMU has to reach running")
	fs.StringVar(&f.Name, "name", "", "name of the VirtualMachineInstance")
	fs.StringVar(&f.UID, "uid", "", "UID of the VirtualMachineInstance")
	fs.StringVar(&f.Namespace, "namespace", "", "namespace of the VirtualMachineInstance")
	fs.StringVar(&f.ShareDir, "kubevirt-share-dir", "/var/run/kubevirt", "folder shared with virt-handler")
	fs.StringVar(&f.EphemeralDiskDir, "ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks", "ephemeral disk folder")
	fs.StringVar(&f.ContainerDiskDir, "container-disk-dir", "/var/run/kubevirt/container-disks", "container disk folder")
	fs.StringVar(&f.HotplugDiskDir, "hotplug-disk-dir", "/var/run/kubevirt/hotplug-disks", "hotplug disk folder")
	fs.IntVar(&f.GracePeriodSeconds, "grace-period-seconds", 30, "grace period on SIGTERM before the domain is destroyed")
	fs.UintVar(&f.HookSidecars, "hook-sidecars", 0, "number of the pod's hook sidecars, whose sockets the launcher waits for in /var/run/kubevirt-hooks")
	fs.StringVar(&f.OVMFPath, "ovmf-path", "/usr/share/OVMF", "folder of the EFI firmware")
	fs.Int64Var(&f.DiskMemoryLimit, "disk-memory-limit", 0, "memory limit of disk verification")
	fs.StringVar(&f.LibvirtLogFilters, "libvirt-log-filters", "", "libvirt log filters")
	fs.BoolVar(&f.RunAsNonRoot, "run-as-nonroot", false, "run as the non-root user")
	fs.BoolVar(&f.ImageVolume, "image-volume", false, "container disks are image volumes")
	fs.BoolVar(&f.AllowEmulation, "allow-emulation", false, "allow TCG when KVM is not usable")
	fs.BoolVar(&f.KeepAfterFailure, "keep-after-failure", false, "stay alive after a failure, for debugging")
	fs.BoolVar(&f.SimulateCrash, "simulate-crash", false, "crash at once (KubeVirt's functional-test hook)")
	addFeatureFlags(fs, &f)
	fs.StringVar(&f.Launcher, "crashloop-launcher", "/usr/bin/virt-launcher", "our launcher's front")
	fs.StringVar(&f.ImageDir, "crashloop-image-dir", "", "our launcher's --image-dir (empty: its default)")
	fs.StringVar(&f.LogLevel, "crashloop-log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(argv); err != nil {
		return f, err
	}
	if fs.NArg() != 0 {
		return f, fmt.Errorf("unexpected arguments %q: virt-launcher-monitor takes flags only", fs.Args())
	}
	if f.Hypervisor == "" {
		// A KubeVirt CR's hypervisors: [{}]: KubeVirt's launcher takes
		// it for KVM (every hypervisor switch of its defaults to KVM).
		f.Hypervisor = HypervisorKVM
	}
	return f, f.validate()
}

// HypervisorKVM is --hypervisor's one value this launcher takes: KubeVirt's
// name for KVM/QEMU (v1.KvmHypervisorName), also its default. KubeVirt
// v1.8.0 and later also know "hyperv-direct" (Microsoft's MSHV).
const HypervisorKVM = "kvm"

// addFeatureFlags adds the flags virt-controller renders from v1.8.0 on.
func addFeatureFlags(fs *pflag.FlagSet, f *Flags) {
	fs.StringVar(&f.Hypervisor, "hypervisor", HypervisorKVM, "the cluster's hypervisor; this launcher runs "+HypervisorKVM+" (KVM/QEMU, or TCG where allowed) only")
	fs.BoolVar(&f.LibvirtHookServerAndClient, "libvirt-hook-server-and-client", false, "KubeVirt's pre-migration libvirt hook server and client (not implemented: ignored)")
	fs.BoolVar(&f.UpgradeOrdinalIfaces, "upgrade-ordinal-ifaces", false, "KubeVirt's pre-migration hook renaming ordinal secondary interfaces (not implemented: ignored)")
	fs.BoolVar(&f.VGPUDedicatedHook, "vgpu-dedicated-hook", false, "KubeVirt's pre-migration hook for vGPU mdev UUIDs (not implemented: ignored)")
	fs.BoolVar(&f.VMStatsCollector, "vm-stats-collector", false, "KubeVirt's guest-agent polling for VM stats (not implemented: ignored)")
	fs.BoolVar(&f.FirmwareAutoSelection, "firmware-auto-selection", false, "libvirt's firmware auto-selection for EFI Secure Boot (not used: ignored)")
	fs.BoolVar(&f.AllowCrossArchEmulation, "allow-cross-arch-emulation", false, "guests of another architecture under TCG (not implemented: ignored)")
}

func (f Flags) validate() error {
	var errs []error
	for _, r := range []struct{ flag, v string }{{"--name", f.Name}, {"--uid", f.UID}, {"--namespace", f.Namespace}, {"--kubevirt-share-dir", f.ShareDir}} {
		if r.v == "" {
			errs = append(errs, fmt.Errorf("%s is required (virt-controller always renders it)", r.flag))
		}
	}
	if f.QemuTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--qemu-timeout %v: want a positive duration such as 240s", f.QemuTimeout))
	}
	if f.Hypervisor != HypervisorKVM {
		errs = append(errs, fmt.Errorf("--hypervisor %q: not a hypervisor this launcher runs (allowed: %s, for KVM/QEMU)", f.Hypervisor, HypervisorKVM))
	}
	if f.GracePeriodSeconds < 0 {
		errs = append(errs, fmt.Errorf("--grace-period-seconds %d: want 0 or more", f.GracePeriodSeconds))
	}
	return errors.Join(errs...)
}

// GracePeriod is --grace-period-seconds as a duration.
func (f Flags) GracePeriod() time.Duration { return time.Duration(f.GracePeriodSeconds) * time.Second }

// ignoredFeature is a flag that virt-controller renders when a feature
// gate is on and that this launcher takes without doing what KubeVirt's
// launcher does with it.
type ignoredFeature struct {
	flag    string
	set     bool
	feature string // what KubeVirt's launcher does with it
	here    string // why nothing changes here, or what does instead
}

// ignoredFeatures are the feature-gated flags of KubeVirt v1.8.0 to main,
// with what KubeVirt's launcher (cmd/virt-launcher) does with each.
func (f Flags) ignoredFeatures() []ignoredFeature {
	const noMigration = "this launcher has no live migration"
	return []ignoredFeature{
		{"--libvirt-hook-server-and-client", f.LibvirtHookServerAndClient,
			"replaces libvirt's qemu hook script with KubeVirt's hook client of the pre-migration hook server", noMigration},
		{"--upgrade-ordinal-ifaces", f.UpgradeOrdinalIfaces,
			"adds the pre-migration hook that renames ordinal secondary pod interfaces on a migration target", noMigration + " and no secondary interfaces"},
		{"--vgpu-dedicated-hook", f.VGPUDedicatedHook,
			"adds the pre-migration hook that rewrites a vGPU's mdev UUID on a migration target", noMigration + " and no vGPUs"},
		{"--vm-stats-collector", f.VMStatsCollector,
			"starts extra guest-agent polling workers for the VM stats", "this launcher polls no guest agent and serves no GetDomainStats"},
		{"--firmware-auto-selection", f.FirmwareAutoSelection,
			"lets libvirt auto-select the firmware (<os firmware='efi'>) of an EFI Secure Boot VMI",
			"this launcher names the Secure Boot OVMF files itself, as KubeVirt's launcher does without the flag"},
		{"--allow-cross-arch-emulation", f.AllowCrossArchEmulation,
			"runs a VMI whose spec.architecture is not the node's under TCG with that architecture's QEMU",
			"this launcher runs amd64 guests only (the node's, where the flag changes nothing) and still refuses another spec.architecture"},
	}
}

// logIgnoredFeatures says in log, once per flag present, which of
// KubeVirt's feature-gated flags were taken but change nothing here, and
// which hypervisor was asked for.
func (f Flags) logIgnoredFeatures(log *slog.Logger) {
	log.Debug("hypervisor", "name", f.Hypervisor)
	for _, x := range f.ignoredFeatures() {
		if x.set {
			log.Info("flag accepted: feature not implemented by this launcher, ignored",
				"flag", x.flag, "kubevirt", x.feature, "here", x.here)
		}
	}
}
