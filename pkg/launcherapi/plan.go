package launcherapi

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// RunPlanFlag is the hidden first argument with which the launcher's
// converter process execs the libvirt runner: RunPlanFlag FD, FD holding
// the RunPlan as JSON.
const RunPlanFlag = "--internal-run-plan"

// RunPlan is what the launcher's converter process (the VMI read, checked,
// defaulted and turned into a domain, its files made, the reaper started)
// hands the libvirt runner it execs in the same process. The runner links
// libvirt but none of the Kubernetes and KubeVirt types: everything it
// needs of the VMI is here.
type RunPlan struct {
	// Argv is the launcher's command line as the user gave it; the runner
	// parses it again for the flags it acts on.
	Argv []string `json:"argv"`
	// Input names the manifest in messages ("stdin" or its path).
	Input string `json:"input"`
	// VMI names the VMI in events.
	VMI PlanVMI `json:"vmi"`
	// Annotations are the VMI's, for its fault plan.
	Annotations map[string]string `json:"annotations,omitempty"`
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
	Ports []PortForward `json:"ports,omitempty"`
	// Reaper is the watchdog process already started for this launch; nil
	// for a dry run.
	Reaper *PlanReaper `json:"reaper,omitempty"`
	// DryRunVMI is the defaulted VMI as YAML, printed before the domain by
	// a dry run.
	DryRunVMI string `json:"dryRunVMI,omitempty"`
}

// PlanVMI names a VMI.
type PlanVMI struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

// PlanReaper is a running watchdog handed over with a plan: its PID (a
// child of the process) and the file descriptor of its pipe's write end.
type PlanReaper struct {
	PID int `json:"pid"`
	FD  int `json:"fd"`
}

// PortForward is a guest port reachable from the host through QEMU's
// user-mode network (a slirp hostfwd).
type PortForward struct {
	// Interface is the VMI interface name, Name the port's name (may be
	// empty).
	Interface, Name string
	// Protocol is TCP or UDP.
	Protocol    string
	GuestPort   int
	HostAddress string
	HostPort    int
}

// PlanFile writes p to a memory file that stays open across exec and
// returns it; its descriptor is what RunPlanFlag takes.
func PlanFile(p RunPlan) (*os.File, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding the run plan: %w", err)
	}
	fd, err := unix.MemfdCreate("virt-launcher-plan", 0)
	if err != nil {
		return nil, fmt.Errorf("creating the run plan's memory file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "run-plan")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the run plan: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewinding the run plan: %w", err)
	}
	return f, nil
}

// ReadPlan reads a run plan from r.
func ReadPlan(r io.Reader) (RunPlan, error) {
	var p RunPlan
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return RunPlan{}, fmt.Errorf("reading the run plan: %w", err)
	}
	return p, nil
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
