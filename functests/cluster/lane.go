// Package cluster is the cluster lane: KubeVirt's own crash-loop behaviour
// checked on a real KubeVirt cluster through kubevirt.io/client-go (point
// KUBECONFIG at it). Without a cluster the suite is skipped with one line
// saying why. The logic that needs no network, patch building and the
// envelope check, lives here and is unit-tested.
package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/envelope"
	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/controller"
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
// High+slack] (envelope.Check). The slack covers second-resolution
// Kubernetes timestamps and controller reaction time.
func CheckEnvelope(gaps []Gap, slack time.Duration) error {
	waits := make([]envelope.Wait, 0, len(gaps))
	for _, g := range gaps {
		waits = append(waits, envelope.Wait{Count: g.Count, Low: g.Low, High: g.High, Observed: g.Observed, Started: true})
	}
	return envelope.Check(waits, envelope.Slack{Early: slack, Late: slack})
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

// Sample is one observation of a VM's crash-loop state: its printable
// status and start-failure count at a moment.
type Sample struct {
	At     time.Time
	Status string
	Count  int
}

// Trace is what one VM went through, in time order.
type Trace []Sample

// Add appends s unless it repeats the last sample's status and count.
func (t Trace) Add(s Sample) Trace {
	if n := len(t); n > 0 && t[n-1].Status == s.Status && t[n-1].Count == s.Count {
		return t
	}
	return append(t, s)
}

// Counts is the sequence of distinct start-failure counts, resets (0)
// included, without repeats.
func (t Trace) Counts() []int {
	var out []int
	for _, s := range t {
		if len(out) == 0 || out[len(out)-1] != s.Count {
			out = append(out, s.Count)
		}
	}
	return out
}

// StatusesAt lists the printable statuses shown while the count was n, in
// order of first appearance.
func (t Trace) StatusesAt(n int) []string {
	var out []string
	for _, s := range t {
		if s.Count == n && !slices.Contains(out, s.Status) {
			out = append(out, s.Status)
		}
	}
	return out
}

// Last is the latest sample (zero if none).
func (t Trace) Last() Sample {
	if len(t) == 0 {
		return Sample{}
	}
	return t[len(t)-1]
}

// CompareLoops checks that two traces of the same scenario agree on what
// the crash-loop rules decide, for failure counts 1..upTo: those counts
// come in the same order (resets are checked where they are caused), and while the count is n both show CrashLoopBackOff.
// Transient statuses that a poller may or may not catch (Starting lasts as
// long as a VMI that fails in milliseconds) are not compared; they are
// reported by the caller. The error names every difference.
func CompareLoops(a, b Trace, nameA, nameB string, upTo int) error {
	var diffs []string
	prefix := func(t Trace) []int {
		var out []int
		for _, c := range t.Counts() {
			if c >= 1 && c <= upTo {
				out = append(out, c)
			}
		}
		return out
	}
	if pa, pb := prefix(a), prefix(b); !slices.Equal(pa, pb) {
		diffs = append(diffs, fmt.Sprintf("start-failure counts up to %d: %s %v, %s %v", upTo, nameA, pa, nameB, pb))
	}
	for n := 1; n <= upTo; n++ {
		for _, side := range []struct {
			name string
			t    Trace
		}{{nameA, a}, {nameB, b}} {
			if !slices.Contains(side.t.StatusesAt(n), string(v1.VirtualMachineStatusCrashLoopBackOff)) {
				diffs = append(diffs, fmt.Sprintf("%s never showed CrashLoopBackOff at count %d (statuses %v)", side.name, n, side.t.StatusesAt(n)))
			}
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%s and %s differ: %s", nameA, nameB, strings.Join(diffs, "; "))
	}
	return nil
}

// ControllerAttempts turns our virt-controller's JSON events for one VM
// into the attempts it made: Started opens one, Exited closes it, and a
// Running phase marks it as having reached Running.
func ControllerAttempts(events []controller.Event) []Attempt {
	byUID := map[string]*Attempt{}
	var order []string
	for _, e := range events {
		if e.VMIUID == "" {
			continue
		}
		a, ok := byUID[e.VMIUID]
		if !ok {
			a = &Attempt{UID: e.VMIUID}
			byUID[e.VMIUID] = a
			order = append(order, e.VMIUID)
		}
		switch {
		case e.Event == controller.EventStarted:
			a.Created = e.Time
		case e.Event == controller.EventExited:
			a.Finished = e.Time
		}
		if e.Phase == string(v1.Running) {
			a.Running = true
		}
	}
	var out []Attempt
	for _, uid := range order {
		if a := byUID[uid]; !a.Created.IsZero() {
			out = append(out, *a)
		}
	}
	return out
}

// ControllerTrace is the trace our virt-controller's JSON events give for
// one VM: every event carries the VM's status after it.
func ControllerTrace(events []controller.Event) Trace {
	var t Trace
	for _, e := range events {
		if e.PrintableStatus == "" {
			continue
		}
		t = t.Add(Sample{At: e.Time, Status: e.PrintableStatus, Count: e.FailCount})
	}
	return t
}
