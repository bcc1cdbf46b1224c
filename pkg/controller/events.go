package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Launcher event names, one per line of a virt-launcher's stdout.
const (
	EventScheduled  = "Scheduled"
	EventRunning    = "Running"
	EventGuestReady = "GuestReady"
	EventFaultFired = "FaultFired"
	EventSucceeded  = "Succeeded"
	EventFailed     = "Failed"
)

// LauncherEvent is one JSON line a virt-launcher writes on stdout. Fields
// the controller does not use are ignored.
type LauncherEvent struct {
	// Time is when the launcher saw it.
	Time time.Time `json:"time"`
	// Event is one of the Event* names.
	Event string `json:"event"`
	// VMI, Namespace and UID identify the VMI.
	VMI       string `json:"vmi"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	// Phase is the VMI phase after the event.
	Phase string `json:"phase"`
	// Reason and Message explain a failure or a fault.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// ExitCode is the launcher's exit code, on final events.
	ExitCode *int `json:"exitCode,omitempty"`
}

// ParseEvent decodes one line of launcher output. A line that is not a JSON
// object with an event name is an error (the caller logs and skips it).
func ParseEvent(line []byte) (LauncherEvent, error) {
	var ev LauncherEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return LauncherEvent{}, fmt.Errorf("launcher event line %.80q: %w", line, err)
	}
	if ev.Event == "" {
		return LauncherEvent{}, errors.New("launcher event line has no \"event\" field")
	}
	return ev, nil
}

// Final reports whether the event ends the VMI.
func (e LauncherEvent) Final() bool { return e.Event == EventSucceeded || e.Event == EventFailed }
