// Package timeline records what happened to each VM on each launch attempt
// of a crash-loop run (the fault, the phases with their times, the backoff
// delay that was planned, the delay that was observed and the envelope it
// had to fall in) and writes it as JSON lines and as an SVG chart that a
// person can open from CI artefacts: attempt (failure count) against delay,
// each envelope drawn as a band, one mark per observed retry.
package timeline

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// PhaseAt is one phase transition of an attempt.
type PhaseAt struct {
	Phase string    `json:"phase"`
	At    time.Time `json:"at"`
}

// Attempt is one launch of one VM.
type Attempt struct {
	VM      string    `json:"vm"`
	Attempt int       `json:"attempt"`
	UID     string    `json:"uid,omitempty"`
	Fault   string    `json:"fault,omitempty"`
	Phases  []PhaseAt `json:"phases,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	// FailCount is the VM's consecutive start-failure count after this
	// attempt ended (0: the attempt reached Running).
	FailCount int `json:"failCount"`
	// Planned is the backoff delay the controller chose before the next
	// attempt; Observed is the gap from this attempt's end to the next
	// launch. Both are wall-clock (already scaled) durations.
	Planned  time.Duration `json:"plannedNs,omitempty"`
	Observed time.Duration `json:"observedNs,omitempty"`
	// Low and High bound the delay KubeVirt's formula allows for
	// FailCount, scaled.
	Low  time.Duration `json:"lowNs,omitempty"`
	High time.Duration `json:"highNs,omitempty"`
}

// InEnvelope tells whether the observed delay fell inside
// [Low-slack, High+slack].
func (a Attempt) InEnvelope(slack time.Duration) bool {
	return a.Observed >= a.Low-slack && a.Observed <= a.High+slack
}

// Timeline is a run: every attempt of every VM.
type Timeline struct {
	Title     string           `json:"title"`
	Seed      launcherapi.Seed `json:"seed"`
	TimeScale float64          `json:"timeScale"`
	Attempts  []Attempt        `json:"attempts"`
	// Slack is how far outside its band an observed delay may fall and
	// still be drawn green (the time a launch takes to notice a failure
	// and to start). Zero means 100 ms.
	Slack time.Duration `json:"slackNs,omitempty"`
}

func (t *Timeline) slack() time.Duration {
	if t.Slack > 0 {
		return t.Slack
	}
	return 100 * time.Millisecond
}

// WriteJSONLines writes a header line, then one line per attempt, ordered
// by VM and attempt.
func (t *Timeline) WriteJSONLines(w io.Writer) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(map[string]any{"title": t.Title, "seed": t.Seed, "timeScale": t.TimeScale}); err != nil {
		return fmt.Errorf("writing timeline header: %w", err)
	}
	for _, a := range t.sorted() {
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("writing timeline: %w", err)
		}
	}
	return nil
}

func (t *Timeline) sorted() []Attempt {
	out := append([]Attempt(nil), t.Attempts...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].VM != out[j].VM {
			return out[i].VM < out[j].VM
		}
		return out[i].Attempt < out[j].Attempt
	})
	return out
}
