// Command virt-launcher-convert is the converter stage of virt-launcher:
// the light front execs it with the user's arguments once the cheap
// checks passed; it reads the VMI, applies KubeVirt's defaults, converts
// it to a libvirt domain, makes the files the domain needs, starts the
// reaper, and execs the libvirt runner, virt-launcher-libvirt, in the same
// process with the plan (see pkg/launchprep). It links no libvirt, and the
// runner links none of the Kubernetes and KubeVirt types.
//
//	virt-launcher-convert [flags] VMI.yaml
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchprep"
)

// Binaries installed next to this one.
const (
	front  = "virt-launcher"
	runner = "virt-launcher-libvirt"
)

func main() {
	exe, err := os.Executable()
	if err != nil {
		exe = "virt-launcher-convert"
	}
	dir := filepath.Dir(exe)
	// SIGTERM/SIGINT from here on ask for a graceful stop, even while the
	// launch is still being set up, instead of killing the process halfway.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	p, code := launchprep.Prepare(ctx, launchprep.Options{
		Argv:     os.Args[1:],
		ImageDir: launcherapi.ImageDirBeside(exe),
		Stdin:    os.Stdin,
		Stderr:   os.Stderr,
		FrontExe: filepath.Join(dir, front),
	})
	if p != nil {
		// The runner installs its own handlers; a signal from here on is
		// its to handle, or ends the process and the reaper cleans up.
		stop()
		code = p.Exec(filepath.Join(dir, runner))
	}
	os.Exit(int(code))
}
