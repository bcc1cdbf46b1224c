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

// Event is one line of a launcher's event stream.
type Event struct {
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
	// Details carries event-specific values (Scheduled: qemuTimeout, seed,
	// accel, faults, ...; Running: startSeconds). Keys are stable and
	// documented in the README.
	Details map[string]any `json:"details,omitempty"`
}

// Final reports whether the event ends the VMI (Succeeded or Failed).
func (e Event) Final() bool { return e.Event == EventSucceeded || e.Event == EventFailed }

// MarshalLine encodes the event as one JSON line, newline included.
func (e Event) MarshalLine() ([]byte, error) {
	e.Time = e.Time.UTC()
	line, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding %s event: %w", e.Event, err)
	}
	return append(line, '\n'), nil
}

// ParseEvent decodes one line of launcher output. A line that is not a JSON
// object with an event name is an error (callers log and skip it).
func ParseEvent(line []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Event{}, fmt.Errorf("launcher event line %.80q: %w", line, err)
	}
	if ev.Event == "" {
		return Event{}, errors.New("launcher event line has no \"event\" field")
	}
	return ev, nil
}
