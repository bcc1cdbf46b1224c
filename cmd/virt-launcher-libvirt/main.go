// Command virt-launcher-libvirt is the libvirt part of virt-launcher: it
// boots one KubeVirt VirtualMachineInstance as a real QEMU VM through
// libvirt, reports its phases as JSON lines on stdout and ends with a
// documented exit code (see pkg/launcherapi). The light front,
// virt-launcher, installed next to it, checks the command line and the
// crash paths and then execs it with the same arguments; the front is also
// its reaper.
//
//	virt-launcher-libvirt [flags] VMI.yaml
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
	"github.com/crashloop-harness/crashloop/pkg/launcher"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == forgetFlag {
		os.Exit(forgetDomain(os.Args[2:], os.Stderr))
	}
	os.Exit(int(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)))
}

// defaultImageDir is <dir of the binary>/../images (see
// launcherapi.ImageDirBeside).
func defaultImageDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "images"
	}
	return launcherapi.ImageDirBeside(exe)
}

func run(argv []string, stdin io.Reader, stdout, stderr io.Writer) launcherapi.ExitCode {
	base := launcherapi.DefaultArgs()
	base.ImageDir = defaultImageDir()
	args, log, code, ok := launcherapi.Begin(argv, base, stderr)
	if !ok {
		return code
	}
	if args.SimulateCrash {
		// KubeVirt's semantics: right after flags and logging, before
		// anything else exists.
		launcherapi.SimulatedCrash(log, "--simulate-crash given")
	}

	data, input, err := manifest.ReadFile(args.Manifest, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcherapi.ExitInputUnreadable
	}
	vmi, doc, err := manifest.Read(data, input)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return launcherapi.ExitInvalidManifest
	}
	if doc.Kind == "VirtualMachine" {
		log.Info("the manifest is a VirtualMachine: its template runs as one VMI, one attempt", "input", input, "vmi", vmi.Namespace+"/"+vmi.Name, "uid", vmi.UID)
	}
	if len(doc.Ignored) > 0 {
		log.Info("ignored cluster-only fields: "+strings.Join(doc.Ignored, ", "), "input", input)
	}
	if faults.WantsSimulatedCrash(vmi.Annotations) {
		launcherapi.SimulatedCrash(log, "VMI carries "+faults.FailFastAnnotation)
	}
	if err := qemu.CheckSupported(doc.Raw); err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", input, err)
		return launcherapi.ExitInvalidManifest
	}
	// What KubeVirt's API defaulting and mutating webhook add to every VMI
	// (a disk per volume, buses, machine type, ...), so that the manifest
	// means here what it means in a cluster; faults then name those disks.
	kvdefaults.Apply(vmi)
	plan, err := faults.Parse(vmi.Annotations, args.Faults)
	if err == nil {
		err = plan.ValidateDisks(diskNames(vmi))
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %s: %v\n", input, err)
		if onlyFlagErrors(err) {
			return launcherapi.ExitUsage
		}
		return launcherapi.ExitInvalidManifest
	}
	// SIGTERM/SIGINT from here on ask for a graceful stop, even while the
	// launch is still being set up, instead of killing the process halfway.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return launcher.Launch(ctx, launcher.Options{Args: args, VMI: vmi, Plan: plan, Input: input, Stdout: stdout, Stderr: stderr, Log: log, Exe: frontExe()})
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
