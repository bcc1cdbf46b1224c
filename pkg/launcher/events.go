package launcher

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// Phases, with KubeVirt's meaning.
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

// Event is one line of the launcher's event stream.
type Event struct {
	Time      time.Time `json:"time"`
	Event     string    `json:"event"`
	VMI       string    `json:"vmi"`
	Namespace string    `json:"namespace"`
	UID       string    `json:"uid"`
	Phase     string    `json:"phase"`
	Attempt   int       `json:"attempt,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	ExitCode  *int      `json:"exitCode,omitempty"`
	// Fault names the fault of a FaultFired event.
	Fault string `json:"fault,omitempty"`
	// Details carries event-specific values (Scheduled: qemuTimeout, seed,
	// accel, faults, ...). Keys are stable and documented in the README.
	Details map[string]any `json:"details,omitempty"`
}

// Format selects how events are written.
type Format string

// Event formats.
const (
	FormatJSON Format = "json"
	FormatText Format = "text"
)

// Emitter writes events, one per line, safe for concurrent use.
type Emitter struct {
	mu     sync.Mutex
	w      io.Writer
	format Format
	base   Event
}

// NewEmitter writes events about one VMI to w. base supplies the VMI
// identity fields copied into every event.
func NewEmitter(w io.Writer, format Format, base Event) *Emitter {
	return &Emitter{w: w, format: format, base: base}
}

// Emit stamps ev with the VMI identity and writes it.
func (e *Emitter) Emit(ev Event) error {
	ev.VMI, ev.Namespace, ev.UID = e.base.VMI, e.base.Namespace, e.base.UID
	if ev.Attempt == 0 {
		ev.Attempt = e.base.Attempt
	}
	ev.Time = ev.Time.UTC()
	var line []byte
	if e.format == FormatText {
		line = []byte(textLine(ev))
	} else {
		var err error
		if line, err = json.Marshal(ev); err != nil {
			return fmt.Errorf("encoding event: %w", err)
		}
		line = append(line, '\n')
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(line); err != nil {
		return fmt.Errorf("writing event: %w", err)
	}
	return nil
}

func textLine(ev Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-10s  %s/%s", ev.Time.Format("15:04:05.000"), ev.Event, ev.Namespace, ev.VMI)
	if ev.Phase != "" && ev.Phase != ev.Event {
		fmt.Fprintf(&b, "  phase=%s", ev.Phase)
	}
	if ev.Fault != "" {
		fmt.Fprintf(&b, "  fault=%s", ev.Fault)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, "  reason=%s", ev.Reason)
	}
	if ev.ExitCode != nil {
		fmt.Fprintf(&b, "  exit=%d", *ev.ExitCode)
	}
	keys := make([]string, 0, len(ev.Details))
	for k := range ev.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := ev.Details[k]
		if s, ok := v.(string); ok && strings.ContainsAny(s, " \t") {
			v = fmt.Sprintf("%q", s)
		} else if _, ok := v.(string); !ok {
			if j, err := json.Marshal(v); err == nil {
				v = string(j)
			}
		}
		fmt.Fprintf(&b, "  %s=%v", k, v)
	}
	if ev.Message != "" {
		fmt.Fprintf(&b, "  %q", ev.Message)
	}
	b.WriteByte('\n')
	return b.String()
}
