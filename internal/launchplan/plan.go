// Package launchplan is what the launcher's three stages hand each other,
// and nothing a runner of the launcher needs: the light front
// (cmd/virt-launcher) parses the command line and reads the manifest once
// and hands both to the converter (Request); the converter
// (pkg/launchprep) hands the libvirt runner (pkg/launcher) everything it
// needs as a RunPlan, the parsed command line and the parsed fault plan
// included, so no stage parses what an earlier one parsed. Both hand-offs
// travel in a memory file across exec. It also holds the stages' common
// first step (Begin), their deliberate crash (SimulatedCrash), the image
// folder beside the binaries and the hidden flags between the binaries.
//
// The contract with the runners (events, exit codes, the command line) is
// pkg/launcherapi.
package launchplan

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/overlay"
)

// Hidden first arguments between the launcher's binaries.
const (
	// PrepareFlag FD: the front execs the converter with its Request in FD.
	PrepareFlag = "--internal-prepare"
	// RunFlag FD: the converter execs the libvirt runner with its RunPlan
	// in FD.
	RunFlag = "--internal-run-plan"
	// ForgetDomainFlag URI DOMAIN: the front's reaper asks the libvirt
	// runner, the only binary that links libvirt, to remove a domain from
	// an external libvirt.
	ForgetDomainFlag = "--internal-forget-domain"
)

// Request is what the light front hands the converter: the command line,
// parsed and validated, and the manifest it read.
type Request struct {
	// Args is the parsed command line.
	Args launcherapi.Args `json:"args"`
	// Input names the manifest in messages ("stdin" or its path).
	Input string `json:"input"`
	// Manifest is the manifest's content.
	Manifest []byte `json:"manifest"`
}

// RunPlan is what the launcher's converter process (the VMI read, checked,
// defaulted and turned into a domain, its files made, the reaper started)
// hands the libvirt runner it execs in the same process. The runner links
// libvirt but none of the Kubernetes and KubeVirt types: everything it
// needs of the VMI is here.
type RunPlan struct {
	// Args is the launcher's command line, parsed and validated by the
	// front.
	Args launcherapi.Args `json:"args"`
	// Faults is the VMI's fault plan (annotations and --fault), parsed and
	// checked against its disks by the converter.
	Faults faults.Plan `json:"faults"`
	// Input names the manifest in messages ("stdin" or its path).
	Input string `json:"input"`
	// VMI names the VMI in events.
	VMI VMI `json:"vmi"`
	// GracePeriodSeconds is the VMI's terminationGracePeriodSeconds.
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
	// DomainXML is the domain the VMI converted to, before faults edit it.
	DomainXML string `json:"domainXML"`
	// Root is the embedded libvirt's per-VMI folder, which the runner owns
	// and removes at the end; empty with an external libvirt.
	Root string `json:"root,omitempty"`
	// Scratch holds fault files: inside Root, or, with an external libvirt
	// (no Root), a temporary folder of its own that the runner removes.
	Scratch string `json:"scratch"`
	// ConsoleLog is the guest's serial console file, LibvirtLog libvirt's
	// own log beside it.
	ConsoleLog string `json:"consoleLog"`
	LibvirtLog string `json:"libvirtLog"`
	// Accel is the accelerator chosen (kvm or tcg) and AccelReason why.
	Accel       string `json:"accel"`
	AccelReason string `json:"accelReason"`
	// Ports are the guest ports forwarded to the host.
	Ports []launcherapi.PortForward `json:"ports,omitempty"`
	// Overlays are the container disks' overlays whose qemu-img the
	// converter started and left running, children of this process: the
	// runner waits for them first, so that qemu-img runs while the runner
	// is exec'd and loads libvirt.
	Overlays []overlay.Pending `json:"overlays,omitempty"`
	// Reaper is the watchdog process already started for this launch; nil
	// for a dry run.
	Reaper *Reaper `json:"reaper,omitempty"`
	// DryRunVMI is the defaulted VMI as YAML, printed before the domain by
	// a dry run.
	DryRunVMI string `json:"dryRunVMI,omitempty"`
}

// VMI names a VMI.
type VMI struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

// Reaper is a running watchdog handed over with a plan: its PID (a child
// of the process) and the file descriptor of its pipe's write end.
type Reaper struct {
	PID int `json:"pid"`
	FD  int `json:"fd"`
}

// Folders are the per-launch folders that whoever holds the plan removes
// when the launch ends: the embedded root (Scratch is inside it), or else
// the scratch folder of its own.
func (p RunPlan) Folders() []string {
	switch {
	case p.Root != "":
		return []string{p.Root}
	case p.Scratch != "":
		return []string{p.Scratch}
	}
	return nil
}

// File writes v as JSON to a memory file that stays open across exec and
// returns it, read from its start; its descriptor is what PrepareFlag and
// RunFlag take.
func File(v any) (*os.File, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the hand-off: %w", err)
	}
	fd, err := unix.MemfdCreate("virt-launcher-plan", 0)
	if err != nil {
		return nil, fmt.Errorf("creating the hand-off's memory file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "plan")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the hand-off: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewinding the hand-off: %w", err)
	}
	return f, nil
}

// Exec replaces this program with the stage at path, handing it v in a
// memory file: path flag FD. It returns only when the exec failed.
func Exec(path, flag string, v any) error {
	f, err := File(v)
	if err != nil {
		return err
	}
	err = syscall.Exec(path, []string{path, flag, strconv.Itoa(int(f.Fd()))}, os.Environ())
	f.Close()
	return fmt.Errorf("running %s: %w", path, err)
}

// Read decodes one hand-off from r; a field this build does not know is
// an error.
func Read[T any](r io.Reader) (T, error) {
	var v T
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var zero T
		return zero, fmt.Errorf("reading the hand-off: %w", err)
	}
	return v, nil
}

// Receive reads the hand-off whose descriptor is the one argument after
// flag (args are the arguments after flag) and closes the descriptor.
func Receive[T any](flag string, args []string) (T, error) {
	var zero T
	if len(args) != 1 {
		return zero, fmt.Errorf("%s: want one file descriptor, got %q", flag, args)
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 0 {
		return zero, fmt.Errorf("%s: want a file descriptor, got %q", flag, args[0])
	}
	f := os.NewFile(uintptr(fd), "plan")
	defer f.Close()
	return Read[T](f)
}
