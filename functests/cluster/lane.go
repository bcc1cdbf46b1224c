// Package cluster is the cluster lane: KubeVirt's own crash-loop behaviour
// checked on a real KubeVirt cluster through kubevirt.io/client-go (point
// KUBECONFIG at it). Without a cluster the suite is skipped with one line
// saying why. The logic that needs no network, patch building and the
// envelope check, lives here and is unit-tested.
package cluster

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

// RemoveTemplateAnnotationPatch is a JSON patch (RFC 6902) that removes an
// annotation from a VirtualMachine's VMI template, the KubeVirt way to let
// the next attempt start clean. Removing a path that does not exist fails
// (RFC 6902, section 4.2), so a patch never silently does nothing.
func RemoveTemplateAnnotationPatch(key string) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("building patch: empty annotation key")
	}
	path := "/spec/template/metadata/annotations/" + escapePointer(key)
	return json.Marshal([]map[string]any{{"op": "remove", "path": path}})
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// Attempt is one VMI of a VM, as the lane observed it.
type Attempt struct {
	UID      string
	Created  time.Time
	Finished time.Time // when it reached Failed or Succeeded; zero if it did not
	Running  bool      // it reached Running
}

// Gap is the wait between a failed attempt and the next one.
type Gap struct {
	// Count is the consecutive start-failure count after the failed attempt.
	Count    int
	Observed time.Duration
	Low      time.Duration
	High     time.Duration
}

// Gaps pairs each start failure with the creation of the next VMI, and
// gives KubeVirt's envelope for its count (scaled by scale).
func Gaps(attempts []Attempt, scale float64) []Gap {
	sorted := append([]Attempt(nil), attempts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Created.Before(sorted[j].Created) })
	var gaps []Gap
	count := 0
	curve := backoff.KubeVirt{}
	for i := 0; i+1 < len(sorted); i++ {
		a := sorted[i]
		if a.Running {
			count = 0
			continue
		}
		if a.Finished.IsZero() {
			continue
		}
		count++
		lo, hi := curve.Bounds(count)
		gaps = append(gaps, Gap{Count: count, Observed: sorted[i+1].Created.Sub(a.Finished),
			Low: time.Duration(float64(lo) * scale), High: time.Duration(float64(hi) * scale)})
	}
	return gaps
}

// CheckEnvelope returns an error naming every gap outside [Low-slack,
// High+slack]. The slack covers second-resolution Kubernetes timestamps
// and controller reaction time.
func CheckEnvelope(gaps []Gap, slack time.Duration) error {
	var bad []string
	for _, g := range gaps {
		if g.Observed < g.Low-slack || g.Observed > g.High+slack {
			bad = append(bad, fmt.Sprintf("failure %d: waited %v, envelope %v..%v", g.Count, g.Observed, g.Low, g.High))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("retries outside KubeVirt's envelope: %s", strings.Join(bad, "; "))
	}
	return nil
}

// AttemptFrom reads an Attempt off a VMI's status.
func AttemptFrom(vmi *v1.VirtualMachineInstance) Attempt {
	a := Attempt{UID: string(vmi.UID), Created: vmi.CreationTimestamp.Time}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		switch t.Phase {
		case v1.Running:
			a.Running = true
		case v1.Failed, v1.Succeeded:
			a.Finished = t.PhaseTransitionTimestamp.Time
		}
	}
	return a
}
