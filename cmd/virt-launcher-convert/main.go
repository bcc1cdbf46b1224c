// Command virt-launcher-convert is the converter stage of virt-launcher:
// the light front execs it once the cheap checks passed, handing it the
// parsed command line and the manifest (internal/launchplan); it reads the
// VMI, applies KubeVirt's defaults, parses its faults, converts it to a
// libvirt domain, makes the files the domain needs, starts the reaper, and
// execs the libvirt runner, virt-launcher-libvirt, in the same process
// with the plan (see pkg/launchprep). It links no libvirt, and the runner
// links none of the Kubernetes and KubeVirt types.
//
//	virt-launcher-convert --internal-prepare FD
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/hooksexec"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchprep"
	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// Binaries installed next to this one.
const (
	front  = "virt-launcher"
	runner = "virt-launcher-libvirt"
)

func main() {
	// SIGTERM/SIGINT from here on ask for a graceful stop, even while the
	// launch is still being set up, instead of killing the process halfway.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) < 2 || os.Args[1] != launchplan.PrepareFlag {
		fmt.Fprintf(os.Stderr, "virt-launcher-convert: prepares the launches that virt-launcher starts; run virt-launcher %v instead\n", os.Args[1:])
		os.Exit(int(launcherapi.ExitUsage))
	}
	req, err := launchplan.Receive[launchplan.Request](launchplan.PrepareFlag, os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher-convert: %v\n", err)
		os.Exit(int(launcherapi.ExitInternal))
	}
	exe, err := os.Executable()
	if err != nil {
		exe = "virt-launcher-convert"
	}
	dir := filepath.Dir(exe)
	p, code := launchprep.Prepare(ctx, launchprep.Options{Request: req, Stderr: os.Stderr, FrontExe: filepath.Join(dir, front),
		ExpandExe: filepath.Join(dir, vmexpandexec.ExpanderName), HooksExe: filepath.Join(dir, hooksexec.HooksName)})
	if p != nil {
		// The runner installs its own handlers; a signal from here on is
		// its to handle, or ends the process and the reaper cleans up.
		stop()
		code = p.Exec(filepath.Join(dir, runner))
	}
	os.Exit(int(code))
}
