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
	"strconv"
	"syscall"

	"github.com/crashloop-harness/crashloop/pkg/launcher"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case forgetFlag:
			os.Exit(forgetDomain(os.Args[2:], os.Stderr))
		case launcherapi.RunPlanFlag:
			os.Exit(int(runPlan(os.Args[2:], os.Stdout, os.Stderr)))
		}
	}
	fmt.Fprintf(os.Stderr, "virt-launcher-libvirt: runs the launches that virt-launcher prepares; run virt-launcher %v instead\n", os.Args[1:])
	os.Exit(int(launcherapi.ExitUsage))
}

// runPlan is the RunPlanFlag mode's main: args is the plan's descriptor.
func runPlan(args []string, stdout, stderr io.Writer) launcherapi.ExitCode {
	// SIGTERM/SIGINT ask for a graceful stop from the first instruction.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if len(args) != 1 {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %s: want one file descriptor, got %q\n", launcherapi.RunPlanFlag, args)
		return launcherapi.ExitUsage
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 0 {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %s: want a file descriptor, got %q\n", launcherapi.RunPlanFlag, args[0])
		return launcherapi.ExitUsage
	}
	f := os.NewFile(uintptr(fd), "run-plan")
	plan, err := launcherapi.ReadPlan(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %v\n", err)
		return launcherapi.ExitInternal
	}
	return launcher.Launch(ctx, plan, stdout, stderr)
}
