package monitor

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
)

// Flags is the compute container's command line as virt-controller v1.6.0
// (and v1.7.0) renders it in pkg/virt-controller/services/template.go,
// plus the flags of ours that say where our launcher is.
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
	fs.StringVar(&f.Launcher, "crashloop-launcher", "/usr/bin/virt-launcher", "our launcher's front")
	fs.StringVar(&f.ImageDir, "crashloop-image-dir", "", "our launcher's --image-dir (empty: its default)")
	fs.StringVar(&f.LogLevel, "crashloop-log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(argv); err != nil {
		return f, err
	}
	if fs.NArg() != 0 {
		return f, fmt.Errorf("unexpected arguments %q: virt-launcher-monitor takes flags only", fs.Args())
	}
	return f, f.validate()
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
	if f.GracePeriodSeconds < 0 {
		errs = append(errs, fmt.Errorf("--grace-period-seconds %d: want 0 or more", f.GracePeriodSeconds))
	}
	return errors.Join(errs...)
}

// GracePeriod is --grace-period-seconds as a duration.
func (f Flags) GracePeriod() time.Duration { return time.Duration(f.GracePeriodSeconds) * time.Second }
