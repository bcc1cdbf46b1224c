// Package crashloop is the local functional lane: real virt-controller and
// virt-launcher processes drive real VMs (TCG here, KVM where the node has
// it) through crash loops and recovery, and each scenario checks the
// observable outcome from the outside: the controller's JSON lines, its
// status command, and the files each launcher leaves in the state folder.
//
// The checks that decide pass or fail live in this file as plain functions
// over those observations, so that each can be shown to reject a wrong
// implementation (lane_test.go feeds them deliberately wrong runs; the
// suite also runs wrong configurations of the real binaries through them).
// The ginkgo suite is in the _test files; run it with
// `make functest FUNCTEST_FLAGS=-ginkgo.label-filter=local`.
package crashloop

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/crashloop-harness/crashloop/functests/envelope"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// Retry is one wait of one VM between a counted failure and the next
// launch, as the controller's events show it.
type Retry struct {
	// VM is "namespace/name".
	VM string
	// Attempt is the launch that failed; Attempt+1 is the retry.
	Attempt int
	// Count is the consecutive failure count after the failure.
	Count int
	// FailedAt is when the failure was counted; StartedAt when the next
	// launch happened (zero if it has not happened yet).
	FailedAt, StartedAt time.Time
	// Planned is the scaled delay the controller announced.
	Planned time.Duration
}

// Observed is the wait that really happened.
func (r Retry) Observed() time.Duration { return r.StartedAt.Sub(r.FailedAt) }

// Retries pairs every BackoffPlanned event with the next Started event of
// the same VM. A manual stop, start or restart in between ends the pairing
// (the next start is not a retry).
func Retries(events []controller.Event) []Retry {
	var out []Retry
	open := map[string]int{} // VM -> index in out of the retry awaiting its start
	for _, e := range events {
		switch e.Event {
		case controller.EventBackoffPlanned:
			out = append(out, Retry{VM: e.VM, Attempt: e.Attempt, Count: e.FailCount, FailedAt: e.Time,
				Planned: time.Duration(e.ScaledDelayNs)})
			open[e.VM] = len(out) - 1
		case controller.EventStarted:
			if i, ok := open[e.VM]; ok {
				out[i].StartedAt = e.Time
				delete(open, e.VM)
			}
		case controller.EventStopRequested, controller.EventStartRequested, controller.EventRestartRequested:
			if i, ok := open[e.VM]; ok {
				out = append(out[:i], out[i+1:]...)
				delete(open, e.VM)
				for k, j := range open {
					if j > i {
						open[k] = j - 1
					}
				}
			}
		}
	}
	return out
}

// Waits are the retries as the shared envelope check takes them, with
// KubeVirt's envelope scaled by scale.
func Waits(retries []Retry, scale float64) []envelope.Wait {
	out := make([]envelope.Wait, 0, len(retries))
	for _, r := range retries {
		lo, hi := envelope.Bounds(r.Count, scale)
		out = append(out, envelope.Wait{VM: r.VM, Count: r.Count, Low: lo, High: hi, Planned: r.Planned, HasPlan: true,
			Observed: r.Observed(), Started: !r.StartedAt.IsZero()})
	}
	return out
}

// CheckEnvelope checks every retry's plan against KubeVirt's envelope for
// its count (scaled), and its observed delay too, allowing slack above the
// top for the time it takes to start a process (envelope.Check).
func CheckEnvelope(retries []Retry, scale float64, slack time.Duration) error {
	return envelope.Check(Waits(retries, scale), envelope.Slack{Late: slack})
}

// Spread describes how a set of times is spread, in seconds.
type Spread struct {
	N      int
	StdDev float64
	Range  float64
	// Buckets counts distinct whole seconds (after dividing by the time
	// scale, so in KubeVirt's seconds) among the values.
	Buckets int
}

func (s Spread) String() string {
	return fmt.Sprintf("n=%d stddev=%.3fs range=%.3fs distinct-seconds=%d", s.N, s.StdDev, s.Range, s.Buckets)
}

// SpreadOf measures times relative to the earliest, in unscaled seconds
// (each wall-clock offset divided by scale).
func SpreadOf(times []time.Time, scale float64) Spread {
	if len(times) == 0 {
		return Spread{}
	}
	ts := append([]time.Time(nil), times...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	vals := make([]float64, len(ts))
	sum := 0.0
	buckets := map[int]bool{}
	for i, t := range ts {
		vals[i] = t.Sub(ts[0]).Seconds() / scale
		sum += vals[i]
		buckets[int(math.Round(vals[i]))] = true
	}
	mean := sum / float64(len(vals))
	ss := 0.0
	for _, v := range vals {
		ss += (v - mean) * (v - mean)
	}
	return Spread{N: len(vals), StdDev: math.Sqrt(ss / float64(len(vals))), Range: vals[len(vals)-1], Buckets: len(buckets)}
}

// HerdThresholds are what CheckHerd demands, in KubeVirt's (unscaled)
// seconds. KubeVirt's first retry is 10 s plus whole seconds in [0, 5]:
// twenty VMs drawing from six values have a standard deviation near 1.7 s
// and cover four or more of them with near certainty.
var HerdThresholds = struct {
	MinStdDev  float64
	MinBuckets int
	// MinGain is how much more spread the retries must have than the
	// failures that caused them, so that noise in when the launchers
	// died cannot pass for jitter.
	MinGain float64
}{MinStdDev: 1.0, MinBuckets: 4, MinGain: 3}

// CheckHerd checks that VMs that failed together did not retry together:
// the first-retry times must spread out, much more than the failures did.
func CheckHerd(failures, retries []time.Time, scale float64) (fail, retry Spread, err error) {
	fail, retry = SpreadOf(failures, scale), SpreadOf(retries, scale)
	t := HerdThresholds
	var bad []string
	if retry.StdDev < t.MinStdDev {
		bad = append(bad, fmt.Sprintf("retry stddev %.3fs < %.1fs", retry.StdDev, t.MinStdDev))
	}
	if retry.Buckets < t.MinBuckets {
		bad = append(bad, fmt.Sprintf("retries fall on %d distinct seconds < %d", retry.Buckets, t.MinBuckets))
	}
	if retry.StdDev < t.MinGain*fail.StdDev {
		bad = append(bad, fmt.Sprintf("retry stddev %.3fs < %g x failure stddev %.3fs", retry.StdDev, t.MinGain, fail.StdDev))
	}
	if len(bad) > 0 {
		return fail, retry, fmt.Errorf("thundering herd: %s (failures %s; retries %s)", strings.Join(bad, ", "), fail, retry)
	}
	return fail, retry, nil
}

// TimeoutRun is one launch that hit the QEMU start timeout, as seen from
// outside: the timeout the controller handed down, the one the launcher
// says it drew (its Scheduled event), when it was scheduled and when it
// failed.
type TimeoutRun struct {
	Passed, Drawn       time.Duration
	ScheduledAt, Failed time.Time
	Reason              string
}

// CheckTimeoutWindow checks KubeVirt's jittered start timeout on one
// launch: the timeout lies in [base, base+jitter) (both scaled), the
// launcher used what the controller passed, and the failure came when the
// drawn timeout ran out (not before it, and not later than slack after).
func CheckTimeoutWindow(r TimeoutRun, base, jitter time.Duration, scale float64, slack time.Duration) error {
	lo := time.Duration(float64(base) * scale)
	hi := time.Duration(float64(base+jitter) * scale)
	var bad []string
	if r.Reason != "QemuStartTimeout" {
		bad = append(bad, fmt.Sprintf("reason %q, want QemuStartTimeout", r.Reason))
	}
	if r.Drawn < lo || r.Drawn >= hi {
		bad = append(bad, fmt.Sprintf("drawn timeout %s outside [%s, %s)", r.Drawn, lo, hi))
	}
	if r.Passed != r.Drawn {
		bad = append(bad, fmt.Sprintf("launcher used %s, controller passed %s", r.Drawn, r.Passed))
	}
	took := r.Failed.Sub(r.ScheduledAt)
	if took < r.Drawn || took > r.Drawn+slack {
		bad = append(bad, fmt.Sprintf("failed %s after scheduling, want [%s, %s]", took.Round(time.Millisecond), r.Drawn, r.Drawn+slack))
	}
	if len(bad) > 0 {
		return errors.New("QEMU start timeout: " + strings.Join(bad, "; "))
	}
	return nil
}

// Outcome is what happened on one attempt of one VM, the unit a replay
// must reproduce.
type Outcome struct {
	Attempt int
	// Faults are the faults that fired, as the launcher reported them.
	Faults string
	// Phase and Reason are the VMI's final (or last) phase and reason.
	Phase, Reason string
	// Planned is the backoff the controller drew after it (unscaled
	// seconds, 0 if none).
	Planned time.Duration
}

func (o Outcome) String() string {
	return fmt.Sprintf("#%d faults=[%s] %s/%s next=%s", o.Attempt, o.Faults, o.Phase, o.Reason, o.Planned)
}

// DiffOutcomes compares two runs VM by VM, attempt by attempt, and
// describes every difference (empty when they are the same).
func DiffOutcomes(a, b map[string][]Outcome) []string {
	var diffs []string
	names := map[string]bool{}
	for n := range a {
		names[n] = true
	}
	for n := range b {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		x, y := a[n], b[n]
		for i := 0; i < max(len(x), len(y)); i++ {
			switch {
			case i >= len(x):
				diffs = append(diffs, fmt.Sprintf("%s: only the second run has %s", n, y[i]))
			case i >= len(y):
				diffs = append(diffs, fmt.Sprintf("%s: only the first run has %s", n, x[i]))
			case x[i] != y[i]:
				diffs = append(diffs, fmt.Sprintf("%s: %s vs %s", n, x[i], y[i]))
			}
		}
	}
	return diffs
}
