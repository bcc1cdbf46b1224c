package controller

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Event is one state change of one VM, as written by JSONLines. It carries
// the VM's status after the change, the planned delay and the seed, so that
// a reader can follow a crash loop from these lines alone.
type Event struct {
	// Time is when the controller made the change.
	Time time.Time `json:"time"`
	// Event names the change (the Event* kinds).
	Event EventKind `json:"event"`
	// VM is "namespace/name" (empty for controller-wide events).
	VM string `json:"vm,omitempty"`
	// Attempt is the launch number of the VMI concerned.
	Attempt int `json:"attempt,omitempty"`
	// VMIUID is the VMI concerned.
	VMIUID string `json:"vmiUID,omitempty"`
	// Phase is the VMI phase after the change.
	Phase string `json:"phase,omitempty"`
	// PrintableStatus is the VM's printable status after the change.
	PrintableStatus string `json:"printableStatus,omitempty"`
	// FailCount is status.startFailure.consecutiveFailCount.
	FailCount int `json:"failCount"`
	// RetryAfter is status.startFailure.retryAfterTimestamp (full precision).
	RetryAfter *time.Time `json:"retryAfter,omitempty"`
	// Delay is the backoff drawn from the curve, unscaled (KubeVirt's
	// seconds); ScaledDelay is what is actually waited.
	Delay       string `json:"delay,omitempty"`
	ScaledDelay string `json:"scaledDelay,omitempty"`
	// ScaledDelayNs is ScaledDelay in nanoseconds, for programs.
	ScaledDelayNs int64 `json:"scaledDelayNs,omitempty"`
	// TimeScale is the --time-scale in force.
	TimeScale float64 `json:"timeScale"`
	// Seed is the --seed in force.
	Seed launcherapi.Seed `json:"seed"`
	// Reason and Message explain the change.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ExitCode is a launcher's exit code (Exited).
	ExitCode *int `json:"exitCode,omitempty"`
	// PID is a launcher's process id (Started, Adopted).
	PID int `json:"pid,omitempty"`
	// QEMUTimeout is the jittered, scaled timeout passed to the launcher.
	QEMUTimeout string `json:"qemuTimeout,omitempty"`
	// PlannedAt and LatenessNs say, for a start that waited out a backoff,
	// when it was due and how late it happened.
	PlannedAt  *time.Time `json:"plannedAt,omitempty"`
	LatenessNs *int64     `json:"latenessNs,omitempty"`
	// Policy and StateDir describe the controller (ControllerStarted).
	Policy   string `json:"policy,omitempty"`
	StateDir string `json:"stateDir,omitempty"`
}

// Observer receives every Event. Implementations must be safe for
// concurrent use: each VM reports from its own goroutine.
type Observer interface {
	// Observe is called once per event, in order per VM.
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe implements Observer.
func (f ObserverFunc) Observe(e Event) { f(e) }

// JSONLines writes each event as one JSON object per line.
type JSONLines struct {
	mu sync.Mutex
	w  io.Writer
}

// NewJSONLines returns an Observer writing to w.
func NewJSONLines(w io.Writer) *JSONLines { return &JSONLines{w: w} }

// Observe implements Observer.
func (j *JSONLines) Observe(e Event) {
	data, err := json.Marshal(e)
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.w.Write(append(data, '\n'))
}
