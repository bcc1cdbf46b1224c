// Package launchprep is the launcher's converter stage, the process
// between the light front (cmd/virt-launcher) and the libvirt runner
// (cmd/virt-launcher-libvirt). It reads the VMI, checks it, applies
// KubeVirt's defaults, parses its faults, chooses the accelerator, makes
// the per-VMI folder and the files the domain needs (containerDisks,
// cloud-init, claims), starts the reaper, converts the VMI to a domain and
// hands all of it, with the command line the front parsed and the fault
// plan it parsed, as a launchplan.RunPlan to the runner, which it execs in
// the same process. So the process that holds libvirt while the guest
// runs carries none of the Kubernetes, KubeVirt and container-image code,
// and the conversion's memory is gone before the guest starts.
package launchprep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/internal/confine"
	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/admission"
	"github.com/crashloop-harness/crashloop/pkg/containerdisk"
	"github.com/crashloop-harness/crashloop/pkg/converter"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/hooksexec"
	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
	"github.com/crashloop-harness/crashloop/pkg/kvmprobe"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
	"github.com/crashloop-harness/crashloop/pkg/overlay"
	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

// Options are one launch to prepare.
type Options struct {
	// Request is what the light front parsed and read.
	Request launchplan.Request
	// Stderr receives the messages for bad input and the reaper's log.
	Stderr io.Writer
	// FrontExe is the light front, virt-launcher, which runs the reaper.
	FrontExe string
	// ExpandExe is virt-launcher-expand, run for a VM that names an
	// instancetype or a preference.
	ExpandExe string
	// HooksExe is virt-launcher-hooks, run for a VMI that names hook
	// sidecars (or in KubeVirt mode, --hook-sidecars).
	HooksExe string
}

// Prepared is a launch ready for the runner: its plan, and the folders and
// reaper it holds until the runner takes them over.
type Prepared struct {
	// Plan is what the runner receives; Exec fills in Reaper.
	Plan   launchplan.RunPlan
	reaper *watchdog.Client
	log    *slog.Logger
}

// Prepare does everything of a launch that needs the VMI's types. On
// success it returns the prepared launch; otherwise the launcher's exit
// code, after it printed why and removed what it had made. Cancelling ctx
// (SIGTERM while a containerDisk is extracted) ends it early.
func Prepare(ctx context.Context, o Options) (*Prepared, launcherapi.ExitCode) {
	a, input := o.Request.Args, o.Request.Input
	log := launchplan.Logger(a, o.Stderr)
	if err := absPaths(&a); err != nil {
		fmt.Fprintf(o.Stderr, "virt-launcher: %v\n", err)
		return nil, launcherapi.ExitUsage
	}
	vmi, doc, objs, code, ok := read(ctx, o, a)
	if !ok {
		return nil, code
	}
	if len(doc.Ignored) > 0 {
		log.Info("ignored cluster-only fields: "+strings.Join(doc.Ignored, ", "), "input", input)
	}
	if faults.WantsSimulatedCrash(vmi.Annotations) {
		// The front saw only a VMI's own annotations; a VirtualMachine's
		// template carries the VMI's.
		launchplan.SimulatedCrash(log, "VMI carries "+faults.FailFastAnnotation)
	}
	if err := converter.CheckSupported(doc.Raw); err != nil {
		fmt.Fprintf(o.Stderr, "virt-launcher: %s: %v\n", input, err)
		return nil, launcherapi.ExitInvalidManifest
	}
	// What KubeVirt's API defaulting and mutating webhook add to every VMI
	// (a disk per volume, buses, machine type, ...), so that the manifest
	// means here what it means in a cluster; faults then name those disks.
	kvdefaults.Apply(vmi)
	// What KubeVirt's admission refuses (and names that would leave their
	// folder or reach QEMU's command line), before anything is made.
	if err := admission.Admit(admission.Input{VMI: vmi, DataVolumeTemplates: doc.DataVolumeTemplates, FeatureGates: a.FeatureGates}); err != nil {
		refuse(o.Stderr, input, err)
		return nil, launcherapi.ExitInvalidManifest
	}
	// Only now are the VM's name and UID known to be short words.
	if doc.Kind == "VirtualMachine" {
		log.Info("the manifest is a VirtualMachine: its template runs as one VMI, one attempt", "input", input, "vmi", vmi.Namespace+"/"+vmi.Name, "uid", vmi.UID)
	}
	plan, err := faults.Parse(vmi.Annotations, a.Faults)
	if err == nil {
		err = plan.ValidateDisks(diskNames(vmi))
	}
	if err != nil {
		fmt.Fprintf(o.Stderr, "virt-launcher: %s: %v\n", input, err)
		if onlyFlagErrors(err) {
			return nil, launcherapi.ExitUsage
		}
		return nil, launcherapi.ExitInvalidManifest
	}
	log = log.With("vmi", vmi.Namespace+"/"+vmi.Name)
	p := &Prepared{log: log, Plan: launchplan.RunPlan{
		Args:               a,
		Faults:             plan,
		Input:              input,
		VMI:                launchplan.VMI{Name: vmi.Name, Namespace: vmi.Namespace, UID: string(vmi.UID)},
		GracePeriodSeconds: vmi.Spec.TerminationGracePeriodSeconds,
	}}
	if code, ok := p.prepare(ctx, vmi, doc.DataVolumeTemplates, o.FrontExe, o.Stderr); !ok {
		p.Abandon()
		return nil, code
	}
	if code, ok := p.hooks(ctx, vmi, objs, o.HooksExe, o.Stderr); !ok {
		p.Abandon()
		return nil, code
	}
	return p, 0
}

// hooks rewrites the domain with the VMI's hook sidecars, after the
// converter, as virt-launcher does (virt-launcher-hooks runs KubeVirt's
// own hook manager and sidecars); a dry run only checks the annotation.
func (p *Prepared) hooks(ctx context.Context, vmi *v1.VirtualMachineInstance, objs []manifest.Object, exe string, stderr io.Writer) (launcherapi.ExitCode, bool) {
	a := p.Plan.Args
	if !hooksexec.Named(vmi) && a.HookSidecars == 0 {
		return 0, true
	}
	work := p.Plan.Root
	if work == "" {
		work = p.Plan.Scratch
	}
	r := hooksexec.Runner{Exe: exe, WorkDir: filepath.Join(work, "hooks"), Sidecars: a.HookSidecars, Timeout: a.StartTimeout.Base}
	var err error
	if a.DryRun {
		err = r.Check(ctx, vmi, objs, p.Plan.Input)
		p.log.Info("dry run: the hook sidecars were checked, not run: the domain is the one before their hooks")
	} else if err = os.MkdirAll(r.WorkDir, 0o700); err == nil {
		start := time.Now()
		if p.Plan.DomainXML, err = r.Apply(ctx, vmi, p.Plan.DomainXML, objs, p.Plan.Input); err == nil {
			p.log.Info("the hook sidecars rewrote the domain", "took", time.Since(start).Round(time.Millisecond), "kubevirtModeSidecars", a.HookSidecars)
		}
	}
	var invalid *manifest.InvalidError
	switch {
	case errors.As(err, &invalid):
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcherapi.ExitInvalidManifest, false
	case err != nil:
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcherapi.ExitInternal, false
	}
	return 0, true
}

// read takes the VM or VMI out of the manifest file, expands the
// instancetype and preference a VM names (vmexpandexec.Expander) and
// decodes it; objs are the objects beside it and in --instancetypes (the
// hook sidecars' ConfigMaps among them).
func read(ctx context.Context, o Options, a launcherapi.Args) (*v1.VirtualMachineInstance, *manifest.Document, []manifest.Object, launcherapi.ExitCode, bool) {
	input := o.Request.Input
	objs, machine, err := objects(o.Request.Manifest, input, a.Instancetypes)
	if err == nil {
		machine, err = vmexpandexec.Expander{Exe: o.ExpandExe, Dir: a.Instancetypes}.Expand(ctx, machine, objs, input)
	}
	var invalid *manifest.InvalidError
	var usage *vmexpandexec.UsageError
	switch {
	case errors.As(err, &invalid):
		fmt.Fprintf(o.Stderr, "virt-launcher: %v\n", err)
		return nil, nil, nil, launcherapi.ExitInvalidManifest, false
	case errors.As(err, &usage):
		fmt.Fprintf(o.Stderr, "virt-launcher: %v\n", err)
		return nil, nil, nil, launcherapi.ExitUsage, false
	case err != nil:
		fmt.Fprintf(o.Stderr, "virt-launcher: %v\n", err)
		return nil, nil, nil, launcherapi.ExitInternal, false
	}
	vmi, doc, err := manifest.Read(machine, input)
	if err != nil {
		fmt.Fprintf(o.Stderr, "virt-launcher: %v\n", err)
		return nil, nil, nil, launcherapi.ExitInvalidManifest, false
	}
	return vmi, doc, objs, 0, true
}

// objects splits the manifest file into its VM or VMI document and the
// objects beside it, then those of the --instancetypes folder (dir, may
// be empty), which is read only for a machine that names objects (an
// instancetype, a preference, hook sidecars and their ConfigMaps).
func objects(data []byte, input, dir string) ([]manifest.Object, []byte, error) {
	l, err := manifest.Split(data, input)
	if err != nil || dir == "" || (len(manifest.Refs(l.Machine)) == 0 && !bytes.Contains(l.Machine, []byte(manifest.HookSidecarsAnnotation))) {
		if l == nil {
			return nil, nil, err
		}
		return l.Objects, l.Machine, err
	}
	more, err := manifest.ReadObjectDir(dir)
	if err != nil {
		return nil, nil, &vmexpandexec.UsageError{Err: fmt.Errorf("--instancetypes %s: %w", dir, err)}
	}
	return append(l.Objects, more...), l.Machine, nil
}

// prepare makes the launch's folders and files, starts the reaper and
// converts the VMI; on failure the caller abandons what was made.
func (p *Prepared) prepare(ctx context.Context, vmi *v1.VirtualMachineInstance, dataVolumes []v1.DataVolumeTemplateSpec, frontExe string, stderr io.Writer) (launcherapi.ExitCode, bool) {
	log, a := p.log, p.Plan.Args
	usage := func(flag string, err error) (launcherapi.ExitCode, bool) {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", flag, err)
		return launcherapi.ExitUsage, false
	}
	mode, _ := converter.ParseAccel(a.Accel)
	host, err := kvmprobe.Read()
	if err != nil && mode == converter.AccelAuto {
		log.Warn("could not read the host's virtualization support", "err", err)
	}
	accel, why := converter.ChooseAccel(mode, host)
	log.Info("accelerator: "+why, "accel", accel)
	p.Plan.Accel, p.Plan.AccelReason = string(accel), why

	images, err := converter.OpenImageStore(a.ImageDir)
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
	consoleLog, err := logNames(a.ConsoleLog, vmi)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", p.Plan.Input, err)
		return launcherapi.ExitInvalidManifest, false
	}
	p.Plan.ConsoleLog = consoleLog
	p.Plan.LibvirtLog = strings.TrimSuffix(consoleLog, ".log") + ".libvirt.log"
	if a.DryRun {
		// A dry run changes nothing on the host: its per-VMI folder is a
		// temporary one, removed on exit, and no log folder is made.
		a.RuntimeDir = os.TempDir()
	} else if err := makeLogs(consoleLog, p.Plan.LibvirtLog); err != nil {
		return usage("--console-log", err)
	}
	if err := os.MkdirAll(a.RuntimeDir, 0o755); err != nil {
		return usage("--runtime-dir", err)
	}
	if err := p.perVMIFolder(a.RuntimeDir, a.LibvirtURI == ""); err != nil {
		return usage("--runtime-dir", err)
	}
	if !a.DryRun {
		// The reaper comes before any file of the domain: whatever happens
		// to this process (or the runner it becomes) from now on, it
		// removes the per-VMI folder and any QEMU of the domain.
		p.reaper, err = watchdog.Start(frontExe, watchdog.Target{Domain: converter.DomainName(vmi), Root: p.Plan.Root, URI: a.LibvirtURI}, stderr)
		if err != nil {
			log.Error("starting the reaper", "err", err)
			return launcherapi.ExitInternal, false
		}
	}
	var conv *converter.Conversion
	tap, err := podTap(a.PodNetwork)
	if err == nil {
		conv, err = converter.Convert(ctx, vmi, converter.DomainOptions{Accel: accel, Images: images, ContainerDiskDir: a.ContainerDiskDir, ConsoleLog: consoleLog, ScratchDir: p.Plan.Scratch, ClaimDir: a.ClaimDir, DryRun: a.DryRun, DataVolumeTemplates: dataVolumes, Tap: tap, Overlays: &p.Plan.Overlays})
	}
	if err != nil {
		if images == nil {
			fmt.Fprintf(stderr, "virt-launcher: %s: %v (image folder %s: not readable; build it with `make images` or pass --image-dir)\n", p.Plan.Input, err, a.ImageDir)
		} else {
			fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", p.Plan.Input, err)
		}
		return launcherapi.ExitInvalidManifest, false
	}
	for _, note := range conv.Notes {
		log.Info(note)
	}
	xml, err := conv.Domain.Marshal()
	if err != nil {
		log.Error("rendering domain XML", "err", err)
		return launcherapi.ExitInternal, false
	}
	p.Plan.DomainXML, p.Plan.Ports = xml, conv.Ports
	if a.DryRun {
		doc, err := yaml.Marshal(vmi)
		if err != nil {
			log.Error("rendering the defaulted VMI", "err", err)
			return launcherapi.ExitInternal, false
		}
		p.Plan.DryRunVMI = string(doc)
	}
	return 0, true
}

// perVMIFolder makes the launch's own folder in runtimeDir (0700, a new
// name no manifest chooses): the embedded libvirt's root, its scratch
// folder beside it, or only a scratch folder for a libvirt of the host.
func (p *Prepared) perVMIFolder(runtimeDir string, embed bool) error {
	prefix := "faults-"
	if embed {
		prefix = "vmi-"
	}
	dir, err := os.MkdirTemp(runtimeDir, prefix)
	if err != nil {
		return err
	}
	p.Plan.Scratch = dir
	if embed {
		p.Plan.Root, p.Plan.Scratch = dir, filepath.Join(dir, "scratch")
	}
	return nil
}

// logNames is the console log's path: --console-log when given, else
// NAMESPACE_NAME_UID.console.log in the default folder. The VMI's
// namespace, name and UID (when set) must each be one path component
// (confine.Name), whatever checked the VMI before: they also name the
// libvirt domain and the libvirt log beside the console log.
func logNames(flag string, vmi *v1.VirtualMachineInstance) (string, error) {
	for _, f := range []struct{ field, value string }{{"metadata.namespace", vmi.Namespace}, {"metadata.name", vmi.Name}, {"metadata.uid", string(vmi.UID)}} {
		if f.value == "" && f.field != "metadata.name" {
			continue
		}
		if err := confine.Name(f.value); err != nil {
			return "", fmt.Errorf("field %s: %w", f.field, err)
		}
	}
	if flag != "" {
		return flag, nil
	}
	return confine.Join(launcherapi.DefaultConsoleDir, fmt.Sprintf("%s_%s_%s.console.log", vmi.Namespace, vmi.Name, vmi.UID))
}

// makeLogs makes the console log's folder (0700 when new) and the console
// and libvirt logs in it, owner-only whatever the umask (they carry what
// the guest prints and name the VMI's files), through an os.Root of the
// folder: a symbolic link planted there under a log's name that leads out
// of it is refused, not followed by QEMU or libvirt, which open the logs
// by path afterwards. What the logs hold is kept (QEMU appends).
func makeLogs(logs ...string) error {
	for _, l := range logs {
		dir := filepath.Dir(l)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		f, _, err := confine.OpenFile(dir, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600, filepath.Base(l))
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// absPaths resolves the folder and file flags against the working
// directory, so that what goes into the domain (read by libvirt and QEMU)
// and into the caches names the same files the user meant.
func absPaths(a *launcherapi.Args) error {
	for _, f := range []struct {
		flag string
		p    *string
	}{{"--claim-dir", &a.ClaimDir}, {"--cache-dir", &a.CacheDir}, {"--runtime-dir", &a.RuntimeDir}, {"--console-log", &a.ConsoleLog}, {"--image-dir", &a.ImageDir}, {"--container-disk-dir", &a.ContainerDiskDir}, {"--instancetypes", &a.Instancetypes}} {
		if *f.p == "" {
			continue
		}
		abs, err := filepath.Abs(*f.p)
		if err != nil {
			return fmt.Errorf("%s %s: %w", f.flag, *f.p, err)
		}
		*f.p = abs
	}
	return nil
}

// Abandon removes what the launch made and tells the reaper that nothing
// is left, for a launch that ends before the runner takes over.
func (p *Prepared) Abandon() {
	// A started qemu-img must not write into a folder being removed.
	_ = overlay.WaitAll(p.Plan.Overlays)
	p.Plan.Overlays = nil
	for _, dir := range p.Plan.Folders() {
		if err := os.RemoveAll(dir); err != nil {
			p.log.Warn("removing per-VMI state", "dir", dir, "err", err)
		}
	}
	if p.reaper != nil {
		if err := p.reaper.Done(); err != nil {
			p.log.Warn("stopping reaper", "err", err)
		}
		p.reaper = nil
	}
}

// Exec hands the launch to the libvirt runner at runner: the plan goes in
// a memory file, the reaper's pipe stays open, and the runner replaces
// this program in the same process (PID, signals, stdout, exit code). It
// returns only when the exec failed, after abandoning the launch.
func (p *Prepared) Exec(runner string) launcherapi.ExitCode {
	if p.reaper != nil {
		fd, err := p.reaper.Handoff()
		if err != nil {
			p.log.Error("handing the reaper over", "err", err)
			p.Abandon()
			return launcherapi.ExitInternal
		}
		p.Plan.Reaper = &launchplan.Reaper{PID: p.reaper.PID(), FD: fd}
	}
	err := launchplan.Exec(runner, launchplan.RunFlag, p.Plan)
	p.log.Error("handing the launch over to "+filepath.Base(runner), "err", err)
	p.Abandon()
	return launcherapi.ExitInternal
}

// refuse prints admission's refusal, one line per refused field.
func refuse(stderr io.Writer, input string, err error) {
	lines := []string{err.Error()}
	var ae *admission.Error
	if errors.As(err, &ae) {
		lines = ae.Lines()
	}
	for _, l := range lines {
		fmt.Fprintf(stderr, "virt-launcher: %s: %s\n", input, l)
	}
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

// diskNames lists the VMI's disk names, for validating disk faults.
func diskNames(vmi *v1.VirtualMachineInstance) []string {
	var names []string
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		names = append(names, d.Name)
	}
	return names
}

// The pod's interfaces under KubeVirt's virt-handler: the tap device its
// phase 1 makes for the pod network (GenerateTapDeviceName of eth0) and
// the pod's own interface.
const (
	podTapDevice = "tap0"
	podInterface = "eth0"
)

// podTap is the converter's tap for --pod-network kubevirt-tap (nil for
// user): tap0 must exist in this network namespace, and eth0's MTU and
// MAC address go to the guest's NIC, as KubeVirt's launcher reads them.
func podTap(mode string) (*converter.TapNIC, error) {
	if mode != launcherapi.PodNetworkKubeVirtTap {
		return nil, nil
	}
	if _, err := net.InterfaceByName(podTapDevice); err != nil {
		return nil, fmt.Errorf("--pod-network %s: no %s in the pod's network namespace (virt-handler makes it before it syncs the VMI): %w", mode, podTapDevice, err)
	}
	eth, err := net.InterfaceByName(podInterface)
	if err != nil {
		return nil, fmt.Errorf("--pod-network %s: the pod's %s: %w", mode, podInterface, err)
	}
	return &converter.TapNIC{Device: podTapDevice, MTU: eth.MTU, MAC: eth.HardwareAddr.String()}, nil
}
