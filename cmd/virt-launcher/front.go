// Command virt-launcher boots one KubeVirt VirtualMachineInstance as a real
// QEMU VM through libvirt, reports its phases as JSON lines on stdout and
// ends with a documented exit code (see pkg/launcherapi). It is one process
// per VMI, like KubeVirt's virt-launcher in its pod.
//
//	virt-launcher [flags] VMI.yaml
//
// This binary is the light front: pure Go, no cgo, no libvirt. It checks
// the command line (exit 3), honours --simulate-crash and the fail-fast
// annotation (a panic, exit 2) and an unreadable manifest (exit 4) without
// loading libvirt or the KubeVirt types, then execs virt-launcher-convert,
// installed next to it, in the same process, handing it the parsed command
// line and the manifest it read (internal/launchplan); that converts the
// VMI to a domain and execs virt-launcher-libvirt, the only binary that
// links libvirt, with the plan. The launch's PID, signals,
// stdout and exit code are the last stage's. The converter starts this
// binary again as the launch's reaper (pkg/watchdog), a few MiB instead of
// a second copy of libvirt.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

// Binaries next to this one: the converter runs the launch on, the libvirt
// part forgets domains of an external libvirt for the reaper.
const (
	convertPart = "virt-launcher-convert"
	libvirtPart = "virt-launcher-libvirt"
)

func main() {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher: finding own executable: %v\n", err)
		os.Exit(int(launcherapi.ExitInternal))
	}
	part := filepath.Join(filepath.Dir(exe), libvirtPart)
	if len(os.Args) > 1 && os.Args[1] == watchdog.Flag {
		log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "reaper")
		os.Exit(watchdog.Run(os.Stdin, os.Args[2:], forgetVia(part), log))
	}
	os.Exit(int(run(os.Args[1:], filepath.Join(filepath.Dir(exe), convertPart), os.Stdin, os.Stderr)))
}

// run checks what the front can check cheaply and execs the converter;
// it returns only when the launch ends here.
func run(argv []string, part string, stdin io.Reader, stderr io.Writer) launcherapi.ExitCode {
	base := launcherapi.DefaultArgs()
	base.ImageDir = launchplan.ImageDirBeside(part)
	args, log, code, ok := launchplan.Begin(argv, base, stderr)
	if !ok {
		return code
	}
	if args.SimulateCrash {
		// KubeVirt's semantics: right after flags and logging, before
		// anything else exists.
		launchplan.SimulatedCrash(log, "--simulate-crash given")
	}
	req := launchplan.Request{Args: args, Input: args.Manifest}
	var err error
	if req.Input == "-" {
		req.Input = "stdin"
		req.Manifest, err = io.ReadAll(stdin)
	} else {
		req.Manifest, err = os.ReadFile(req.Input)
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: reading %s: %v\n", req.Input, err)
		return launcherapi.ExitInputUnreadable
	}
	if faults.WantsSimulatedCrash(annotations(req.Manifest)) {
		launchplan.SimulatedCrash(log, "VMI carries "+faults.FailFastAnnotation)
	}
	err = launchplan.Exec(part, launchplan.PrepareFlag, req)
	fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
	return launcherapi.ExitInternal
}

// annotations reads only metadata.annotations of a VMI manifest (YAML or
// JSON), far cheaper than the KubeVirt types. A manifest it cannot read
// has none here: the converter reports what is wrong with it.
func annotations(data []byte) map[string]string {
	var meta struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return nil
	}
	return meta.Metadata.Annotations
}

// forgetVia removes a domain from an external libvirt by running the
// libvirt part, the only binary that links libvirt.
func forgetVia(part string) watchdog.Forget {
	return func(uri, domain string) error {
		out, err := exec.Command(part, launchplan.ForgetDomainFlag, uri, domain).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", libvirtPart, err, out)
		}
		return nil
	}
}
