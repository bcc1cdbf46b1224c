package launcherapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Phases a launcher reports, with KubeVirt's meaning.
const (
	PhaseScheduled = "Scheduled"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
)

// Event names. Scheduled, Running, Succeeded and Failed are phase changes;
// GuestReady and FaultFired happen within a phase.
const (
	EventScheduled  = "Scheduled"
	EventRunning    = "Running"
	EventGuestReady = "GuestReady"
	EventFaultFired = "FaultFired"
	EventSucceeded  = "Succeeded"
	EventFailed     = "Failed"
)

// Reasons carried by final events.
const (
	ReasonGuestShutdown    = "GuestShutdown"
	ReasonStopped          = "Stopped"
	ReasonInternalError    = "InternalError"
	ReasonQemuStartTimeout = "QemuStartTimeout"
	ReasonLibvirtError     = "LibvirtError"
	ReasonQemuFailed       = "QemuFailed"
	ReasonVMCrashed        = "VMCrashed"
	ReasonGuestPanicked    = "GuestPanicked"
)

// EventVersion is the version of the event lines this package writes and
// reads. It changes when a field changes meaning or shape; a reader refuses
// a line of another version rather than misread it.
const EventVersion = 1

// Event is one line of a launcher's event stream.
type Event struct {
	// Version is EventVersion; MarshalLine sets it.
	Version int `json:"version"`
	// Time is when the launcher saw it (RFC 3339 with nanoseconds, UTC).
	Time time.Time `json:"time"`
	// Event is one of the Event* names.
	Event string `json:"event"`
	// VMI, Namespace and UID identify the VMI.
	VMI       string `json:"vmi"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	// Phase is the VMI phase after the event.
	Phase string `json:"phase"`
	// Attempt is the launch attempt of the VM (--attempt).
	Attempt int `json:"attempt,omitempty"`
	// Reason and Message explain a final event or a fault.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ExitCode is the launcher's exit code, on final events.
	ExitCode *int `json:"exitCode,omitempty"`
	// Fault names the fault of a FaultFired event.
	Fault string `json:"fault,omitempty"`
	// Scheduled is what the launch drew and chose, on Scheduled events.
	Scheduled *ScheduledDetails `json:"scheduled,omitempty"`
	// Running is how the start went, on Running events.
	Running *RunningDetails `json:"running,omitempty"`
	// Fired is what the fault acted on, on FaultFired events.
	Fired *FaultDetails `json:"fired,omitempty"`
	// Stopped is how a stop ended, on final events with ReasonStopped.
	Stopped *StoppedDetails `json:"stopped,omitempty"`
}

// How a stop (SIGTERM or SIGINT) ended: StoppedDetails.How.
const (
	// StopGraceful: the guest shut down within the grace period.
	StopGraceful = "Graceful"
	// StopDestroyed: the domain was destroyed, because the grace period
	// passed or the graceful shutdown could not be asked for.
	StopDestroyed = "Destroyed"
	// StopBeforeRunning: the stop came before the domain was running;
	// QEMU was destroyed or never started.
	StopBeforeRunning = "BeforeRunning"
)

// StoppedDetails are the values of a final event with ReasonStopped.
type StoppedDetails struct {
	// How is StopGraceful, StopDestroyed or StopBeforeRunning.
	How string `json:"how"`
}

// ScheduledDetails are the Scheduled event's values: what the launch drew
// (start timeout, seed, faults) and chose (accelerator, libvirt, files).
type ScheduledDetails struct {
	// QemuTimeout is the drawn start timeout (Go duration text), also in
	// seconds; QemuTimeoutBase and QemuTimeoutJitter are what it was drawn
	// from.
	QemuTimeout        string  `json:"qemuTimeout"`
	QemuTimeoutSeconds float64 `json:"qemuTimeoutSeconds"`
	QemuTimeoutBase    string  `json:"qemuTimeoutBase"`
	QemuTimeoutJitter  string  `json:"qemuTimeoutJitter"`
	// Seed is the seed every draw came from (--seed, or the one picked).
	Seed uint64 `json:"seed"`
	// Accel is the accelerator (kvm or tcg), AccelReason why.
	Accel       string `json:"accel"`
	AccelReason string `json:"accelReason"`
	// Libvirt is "embedded:<root>" or the --libvirt-uri.
	Libvirt string `json:"libvirt"`
	// ConsoleLog is the guest's serial console file, LibvirtLog libvirt's
	// own log.
	ConsoleLog string `json:"consoleLog"`
	LibvirtLog string `json:"libvirtLog"`
	// GracePeriod is the graceful stop time (Go duration text).
	GracePeriod string `json:"gracePeriod"`
	// FaultPlan is what was asked; Faults what fires on this attempt.
	FaultPlan []FaultSpec     `json:"faultPlan"`
	Faults    []FaultDecision `json:"faults"`
}

// StartTimeout parses QemuTimeout.
func (d ScheduledDetails) StartTimeout() (time.Duration, error) {
	t, err := time.ParseDuration(d.QemuTimeout)
	if err != nil {
		return 0, fmt.Errorf("the Scheduled event's qemuTimeout %q: %w", d.QemuTimeout, err)
	}
	return t, nil
}

// FaultSpec is one fault asked for a VMI, in canonical form.
type FaultSpec struct {
	Fault       string            `json:"fault"`
	Term        string            `json:"term"`
	Source      string            `json:"source,omitempty"`
	Probability float64           `json:"probability"`
	Count       int               `json:"count,omitempty"`
	Delay       string            `json:"delay,omitempty"`
	Attempts    string            `json:"attempts"`
	Params      map[string]string `json:"params,omitempty"`
}

// FaultDecision is one fault that fires on this attempt, and at which
// lifecycle point.
type FaultDecision struct {
	Fault  string            `json:"fault"`
	Point  string            `json:"point"`
	Delay  string            `json:"delay,omitempty"`
	Params map[string]string `json:"params,omitempty"`
}

// RunningDetails are the Running event's values.
type RunningDetails struct {
	// StartSeconds is the time from the domain start to Running.
	StartSeconds float64 `json:"startSeconds"`
	// Ports are the guest ports forwarded to the host, when the VMI's
	// interfaces have ports.
	Ports []PortForward `json:"ports,omitempty"`
}

// PortForward is a guest port reachable from the host through QEMU's
// user-mode network (a slirp hostfwd): connect to HostAddress:HostPort to
// reach GuestPort.
type PortForward struct {
	// Interface is the VMI interface name, Name the port's name (may be
	// empty).
	Interface string `json:"interface"`
	Name      string `json:"name"`
	// Protocol is TCP or UDP.
	Protocol    string `json:"protocol"`
	GuestPort   int    `json:"guestPort"`
	HostAddress string `json:"hostIP"`
	HostPort    int    `json:"hostPort"`
}

// FaultDetails are a FaultFired event's values; each fault sets the ones
// it acts on (the README's fault table).
type FaultDetails struct {
	// At is the lifecycle point (launcher-crash, libvirt-error).
	At string `json:"at,omitempty"`
	// Signal and After are qemu-kill's signal and delay.
	Signal string `json:"signal,omitempty"`
	After  string `json:"after,omitempty"`
	// Kernel is bad-kernel's missing kernel path.
	Kernel string `json:"kernel,omitempty"`
	// Device, Op and Errno are disk-io-error's disk, operation and errno.
	Device string `json:"device,omitempty"`
	Op     string `json:"op,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	// Params are a guest directive's parameters.
	Params map[string]string `json:"params,omitempty"`
}

// Final reports whether the event ends the VMI (Succeeded or Failed).
func (e Event) Final() bool { return e.Event == EventSucceeded || e.Event == EventFailed }

// MarshalLine encodes the event as one JSON line of EventVersion, newline
// included.
func (e Event) MarshalLine() ([]byte, error) {
	e.Version = EventVersion
	e.Time = e.Time.UTC()
	line, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding %s event: %w", e.Event, err)
	}
	return append(line, '\n'), nil
}

// ParseEvent decodes one line of launcher output. A line that is not a JSON
// object with an event name, or is of another version than EventVersion,
// is an error (callers log and skip it).
func ParseEvent(line []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Event{}, fmt.Errorf("launcher event line %.80q: %w", line, err)
	}
	if ev.Version != EventVersion {
		if ev.Version == 0 {
			return Event{}, fmt.Errorf("launcher event line %.80q has no \"version\": this reader reads version %d", line, EventVersion)
		}
		return Event{}, fmt.Errorf("launcher event line has version %d: this reader reads version %d only (launcher and reader from different builds?)", ev.Version, EventVersion)
	}
	if ev.Event == "" {
		return Event{}, errors.New("launcher event line has no \"event\" field")
	}
	return ev, nil
}
