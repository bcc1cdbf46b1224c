// Command virt-launcher-libvirt is the libvirt runner of virt-launcher,
// the only one of its binaries that links libvirt: it boots the domain
// that virt-launcher-convert made of a VMI as a real QEMU VM, reports its
// phases as JSON lines on stdout and ends with a documented exit code (see
// pkg/launcherapi). The converter execs it in the same process with a run
// plan; the light front, virt-launcher, is its reaper.
//
//	virt-launcher-libvirt --internal-run-plan FD
//	virt-launcher-libvirt --internal-forget-domain URI DOMAIN
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/launcher"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case launchplan.ForgetDomainFlag:
			os.Exit(forgetDomain(os.Args[2:], os.Stderr))
		case launchplan.RunFlag:
			os.Exit(int(runPlan(os.Args[2:], os.Stdout, os.Stderr)))
		}
	}
	fmt.Fprintf(os.Stderr, "virt-launcher-libvirt: runs the launches that virt-launcher prepares; run virt-launcher %v instead\n", os.Args[1:])
	os.Exit(int(launcherapi.ExitUsage))
}

// runPlan is the launchplan.RunFlag mode's main: args is the plan's
// descriptor.
func runPlan(args []string, stdout, stderr io.Writer) launcherapi.ExitCode {
	// SIGTERM/SIGINT ask for a graceful stop from the first instruction.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	plan, err := launchplan.Receive[launchplan.RunPlan](launchplan.RunFlag, args)
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %v\n", err)
		return launcherapi.ExitInternal
	}
	return launcher.Launch(ctx, plan, stdout, stderr)
}
