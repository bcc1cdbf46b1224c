// Package envelope is the one check of the waits between crash-loop
// attempts against KubeVirt's backoff envelope, shared by the local lane
// (functests/crashloop, the controller's events) and the cluster lane
// (functests/cluster, KubeVirt's and ours on a cluster).
package envelope

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

// Bounds is KubeVirt's allowed delay after the count-th consecutive start
// failure, scaled by scale.
func Bounds(count int, scale float64) (lo, hi time.Duration) {
	l, h := backoff.KubeVirt{}.Bounds(count)
	return time.Duration(float64(l) * scale), time.Duration(float64(h) * scale)
}

// Wait is one wait between a counted start failure and the next attempt.
type Wait struct {
	// VM names the VM in messages; empty when the caller checks one VM.
	VM string
	// Count is the consecutive failure count after the failure.
	Count int
	// Low and High are the envelope for Count (see Bounds).
	Low, High time.Duration
	// Planned is the delay the controller announced, when HasPlan.
	Planned time.Duration
	HasPlan bool
	// Observed is the wait that happened, when Started (the next attempt
	// began).
	Observed time.Duration
	Started  bool
}

// Slack widens the envelope for what the observation cannot resolve:
// Early below Low (second-resolution timestamps), Late above High (the
// time it takes to start a process, a controller's reaction).
type Slack struct {
	Early, Late time.Duration
}

// Check returns an error naming every wait outside its envelope: a plan
// outside [Low, High], an observed wait outside [Low-Early, High+Late].
// Waits whose next attempt has not begun are checked on their plan only.
func Check(waits []Wait, slack Slack) error {
	var bad []string
	for _, w := range waits {
		who := fmt.Sprintf("failure %d", w.Count)
		if w.VM != "" {
			who = w.VM + " " + who
		}
		if w.HasPlan && (w.Planned < w.Low || w.Planned > w.High) {
			bad = append(bad, fmt.Sprintf("%s: planned %v, envelope %v..%v", who, w.Planned, w.Low, w.High))
		}
		if w.Started && (w.Observed < w.Low-slack.Early || w.Observed > w.High+slack.Late) {
			bad = append(bad, fmt.Sprintf("%s: waited %v, envelope %v..%v", who, w.Observed.Round(time.Millisecond), w.Low, w.High))
		}
	}
	if len(bad) > 0 {
		return errors.New("retries outside KubeVirt's envelope: " + strings.Join(bad, "; "))
	}
	return nil
}
