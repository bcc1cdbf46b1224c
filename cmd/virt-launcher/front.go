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
// installed next to it, with the same arguments, in the same process; that
// converts the VMI to a domain and execs virt-launcher-libvirt, the only
// binary that links libvirt, with the plan. The launch's PID, signals,
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
	"syscall"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

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
func run(argv []string, part string, stdin *os.File, stderr io.Writer) launcherapi.ExitCode {
	base := launcherapi.DefaultArgs()
	base.ImageDir = launcherapi.ImageDirBeside(part)
	args, log, code, ok := launcherapi.Begin(argv, base, stderr)
	if !ok {
		return code
	}
	if args.SimulateCrash {
		// KubeVirt's semantics: right after flags and logging, before
		// anything else exists.
		launcherapi.SimulatedCrash(log, "--simulate-crash given")
	}
	input := args.Manifest
	var data []byte
	var err error
	if input == "-" {
		input = "stdin"
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(input)
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: reading %s: %v\n", input, err)
		return launcherapi.ExitInputUnreadable
	}
	if faults.WantsSimulatedCrash(annotations(data)) {
		launcherapi.SimulatedCrash(log, "VMI carries "+faults.FailFastAnnotation)
	}
	if args.Manifest == "-" {
		// The converter reads stdin again: give it what was read.
		if err := replaceStdin(data); err != nil {
			log.Error("handing stdin to "+convertPart, "err", err)
			return launcherapi.ExitInternal
		}
	}
	err = syscall.Exec(part, append([]string{part}, argv...), os.Environ())
	fmt.Fprintf(stderr, "virt-launcher: running %s: %v\n", part, err)
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

// replaceStdin makes file descriptor 0 a memory file holding data, read
// from its start.
func replaceStdin(data []byte) error {
	fd, err := unix.MemfdCreate("virt-launcher-stdin", 0)
	if err != nil {
		return fmt.Errorf("creating a memory file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "stdin")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing the manifest to a memory file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewinding the memory file: %w", err)
	}
	if err := unix.Dup2(fd, 0); err != nil {
		return fmt.Errorf("making the memory file stdin: %w", err)
	}
	return nil
}

// forgetVia removes a domain from an external libvirt by running the
// libvirt part, the only binary that links libvirt.
func forgetVia(part string) watchdog.Forget {
	return func(uri, domain string) error {
		out, err := exec.Command(part, "--internal-forget-domain", uri, domain).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", libvirtPart, err, out)
		}
		return nil
	}
}
