package backoff

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

// Policy is the crash-loop configuration shared by the VMs of a controller.
// The zero value is KubeVirt's behaviour at real time.
type Policy struct {
	// Curve computes the delay per failure count; nil means KubeVirt{}.
	Curve Curve
	// Scale multiplies every duration handed out (delays, windows); zero
	// or less means 1.
	Scale float64
	// GiveUpAfter stops retrying after this many counted failures (within
	// GiveUpWindow when that is set); zero never gives up.
	GiveUpAfter int
	// GiveUpWindow limits GiveUpAfter to failures no older than this
	// (unscaled); zero counts every consecutive failure.
	GiveUpWindow time.Duration
	// CountRunningFailuresWithin, when positive, counts a VMI that reached
	// Running but ended within this (unscaled) duration as a failure, and
	// clears the record only once a VMI has been Running that long. Zero is
	// upstream's rule: reaching Running clears the record at once.
	CountRunningFailuresWithin time.Duration
}

// Scaled multiplies d by the policy's time scale.
func (p Policy) Scaled(d time.Duration) time.Duration {
	if p.Scale <= 0 || p.Scale == 1 {
		return d
	}
	return time.Duration(float64(d) * p.Scale)
}

func (p Policy) curve() Curve {
	if p.Curve == nil {
		return KubeVirt{}
	}
	return p.Curve
}

// String describes the policy in one line for logs and the start banner.
func (p Policy) String() string {
	s := fmt.Sprintf("curve=%s scale=%g", p.curve(), p.effectiveScale())
	if p.GiveUpAfter > 0 {
		s += fmt.Sprintf(" give-up-after=%d", p.GiveUpAfter)
		if p.GiveUpWindow > 0 {
			s += fmt.Sprintf(" within=%s", p.GiveUpWindow)
		}
	}
	if p.CountRunningFailuresWithin > 0 {
		s += fmt.Sprintf(" count-running-failures-within=%s", p.CountRunningFailuresWithin)
	}
	return s
}

func (p Policy) effectiveScale() float64 {
	if p.Scale <= 0 {
		return 1
	}
	return p.Scale
}

// History is the bookkeeping the optional give-up rule needs beyond
// VirtualMachineStatus.StartFailure. Persist it next to the VM; it is
// cleared together with the StartFailure record.
type History struct {
	// Failures holds the times of the counted failures still relevant to
	// the give-up rule, oldest first.
	Failures []time.Time `json:"failures,omitempty"`
	// GaveUp is set once the give-up rule fired; no retry is planned then.
	GaveUp bool `json:"gaveUp,omitempty"`
}

// Change reports what Sync did to the StartFailure record.
type Change struct {
	// Counted is true when a new failure was recorded.
	Counted bool
	// Cleared is true when an existing record was removed.
	Cleared bool
	// GaveUp is true when this failure made the give-up rule fire.
	GaveUp bool
	// FailCount is the consecutive failure count after the change.
	FailCount int
	// Delay is the unscaled delay drawn for the counted failure.
	Delay time.Duration
	// ScaledDelay is Delay times the policy's scale: the real wait.
	ScaledDelay time.Duration
	// RetryAfter is when the next start may happen (zero if none planned).
	RetryAfter time.Time
	// Reason says in a few words why the record changed.
	Reason string
}

// TracksFailures reports whether a run strategy restarts failed VMIs and so
// keeps a start-failure record: Always, RerunOnFailure and Once.
func TracksFailures(s v1.VirtualMachineRunStrategy) bool {
	return s == v1.RunStrategyAlways || s == v1.RunStrategyRerunOnFailure || s == v1.RunStrategyOnce
}

// Tracker applies a Policy to one VM with an injected clock and random
// source. Give each VM its own Rand when draws must be reproducible
// regardless of how VMs interleave.
type Tracker struct {
	// Policy is the configuration applied.
	Policy Policy
	// Clock tells the time of failures and retries.
	Clock Clock
	// Rand draws the jitter.
	Rand Rand
}

// Sync applies the counting and reset rules to vm.Status.StartFailure for
// the VM's current VMI (nil when there is none) and returns what changed.
// h may be nil when the give-up rule is off.
//
// With the zero Policy it follows upstream's syncStartFailureStatus rule by
// rule and in its order (rules C1-C17 of the fidelity list):
//  1. a VMI that was ever Running (a Running entry in its
//     phaseTransitionTimestamps, not status.phase) clears the record;
//  2. a run strategy other than Always, RerunOnFailure or Once clears it;
//     a run strategy that cannot be determined (spec.running and
//     spec.runStrategy both set) does not clear it, and the VMI may still be
//     counted below, as upstream (C16: the webhook rejects such a VM, so
//     there is no reason to be stricter than upstream here);
//  3. a VMI in a final phase (Failed or Succeeded) that never ran counts
//     once per UID; anything else leaves the record as it is.
//
// The one difference is the retry time: RetryAfter is now plus the exact
// (scaled) delay, kept to the nanosecond, where upstream's is stored in
// whole seconds; see [TimeLeft].
func (t Tracker) Sync(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, h *History) Change {
	p := t.Policy
	runningAt, ran := PhaseTime(vmi, v1.Running)
	if ran && p.CountRunningFailuresWithin <= 0 {
		return clearWith(vm, h, "VMI reached Running")
	}
	if strategy, err := vm.RunStrategy(); err == nil && !TracksFailures(strategy) {
		return clearWith(vm, h, fmt.Sprintf("runStrategy %q does not restart failed VMIs", strategy))
	}
	if vmi == nil {
		return Change{FailCount: failCount(vm)}
	}
	now := t.Clock.Now()
	if ran {
		// Only with CountRunningFailuresWithin, an extension upstream does
		// not have.
		end := now
		if vmi.IsFinal() {
			if at, ok := PhaseTime(vmi, vmi.Status.Phase); ok {
				end = at
			}
		}
		if end.Sub(runningAt) >= p.Scaled(p.CountRunningFailuresWithin) {
			return clearWith(vm, h, fmt.Sprintf("VMI ran for %s", p.Scaled(p.CountRunningFailuresWithin)))
		}
	}
	if !vmi.IsFinal() {
		return Change{FailCount: failCount(vm)}
	}
	if sf := vm.Status.StartFailure; sf != nil && sf.LastFailedVMIUID == vmi.UID {
		return Change{FailCount: sf.ConsecutiveFailCount}
	}
	return t.count(vm, vmi, h, now)
}

func (t Tracker) count(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, h *History, now time.Time) Change {
	p := t.Policy
	count := failCount(vm) + 1
	delay := p.curve().Delay(count, t.Rand)
	scaled := p.Scaled(delay)
	ch := Change{
		Counted:     true,
		FailCount:   count,
		Delay:       delay,
		ScaledDelay: scaled,
		RetryAfter:  now.Add(scaled),
		Reason:      fmt.Sprintf("VMI %s ended %s without staying Running", vmi.UID, vmi.Status.Phase),
	}
	if h != nil {
		h.Failures = append(h.Failures, now)
		h.Failures = trim(h.Failures, p, now)
		if p.GiveUpAfter > 0 && len(h.Failures) >= p.GiveUpAfter {
			h.GaveUp = true
			ch.GaveUp = true
			ch.RetryAfter = time.Time{}
			ch.Reason += fmt.Sprintf("; giving up after %d failures", len(h.Failures))
		}
	}
	var retry *metav1.Time
	if !ch.RetryAfter.IsZero() {
		rt := metav1.NewTime(ch.RetryAfter)
		retry = &rt
	}
	vm.Status.StartFailure = &v1.VirtualMachineStartFailure{
		ConsecutiveFailCount: count,
		LastFailedVMIUID:     vmi.UID,
		RetryAfterTimestamp:  retry,
	}
	return ch
}

// trim keeps the failures the give-up rule can still use.
func trim(fs []time.Time, p Policy, now time.Time) []time.Time {
	if p.GiveUpAfter <= 0 {
		return nil
	}
	if p.GiveUpWindow > 0 {
		cut := now.Add(-p.Scaled(p.GiveUpWindow))
		i := 0
		for i < len(fs) && fs[i].Before(cut) {
			i++
		}
		fs = fs[i:]
	}
	if len(fs) > p.GiveUpAfter {
		fs = fs[len(fs)-p.GiveUpAfter:]
	}
	return fs
}

func clearWith(vm *v1.VirtualMachine, h *History, reason string) Change {
	had := vm.Status.StartFailure != nil
	ClearRecord(vm, h)
	if !had {
		return Change{}
	}
	return Change{Cleared: true, Reason: reason}
}

func failCount(vm *v1.VirtualMachine) int {
	if vm.Status.StartFailure == nil {
		return 0
	}
	return vm.Status.StartFailure.ConsecutiveFailCount
}

// ClearRecord removes the start-failure record and its history, as an
// accepted manual operation that goes through a state-change request does
// (pkg/vmops says which).
func ClearRecord(vm *v1.VirtualMachine, h *History) {
	vm.Status.StartFailure = nil
	if h != nil {
		*h = History{}
	}
}

// NextStart tells when the VM may next be started by its run strategy:
// ok is false when the give-up rule fired; a zero time means at once.
func NextStart(vm *v1.VirtualMachine, h *History) (at time.Time, ok bool) {
	if h != nil && h.GaveUp {
		return time.Time{}, false
	}
	sf := vm.Status.StartFailure
	if sf == nil || sf.RetryAfterTimestamp == nil {
		return time.Time{}, true
	}
	return sf.RetryAfterTimestamp.Time, true
}

// TimeLeft is how long the VM must still wait before a start at now; zero
// when it may start.
//
// Deliberate deviation "exact-time": upstream's startFailureBackoffTimeLeft
// subtracts whole Unix seconds (each side truncated, see
// upstreamTimeLeftSeconds), so it may start up to a second before the
// exact retry time, and a retry time within the current second counts as
// passed. This project keeps the retry time and the wait to the nanosecond,
// because --time-scale shrinks a 10 s delay to 100 ms, where whole seconds
// would erase the backoff altogether. A record without a retry time (which
// upstream never writes, and would dereference) means no wait.
func TimeLeft(vm *v1.VirtualMachine, now time.Time) time.Duration {
	sf := vm.Status.StartFailure
	if sf == nil || sf.RetryAfterTimestamp == nil {
		return 0
	}
	return max(sf.RetryAfterTimestamp.Time.Sub(now), 0)
}

// upstreamTimeLeftSeconds is upstream's startFailureBackoffTimeLeft as it
// is: the retry time's Unix seconds minus now's Unix seconds, or zero when
// that is not positive. It exists to show the "exact-time" deviation next
// to [TimeLeft]; the controller does not use it. A record without a retry
// time gives zero here (upstream would panic).
func upstreamTimeLeftSeconds(vm *v1.VirtualMachine, now time.Time) int64 {
	sf := vm.Status.StartFailure
	if sf == nil || sf.RetryAfterTimestamp == nil {
		return 0
	}
	return max(sf.RetryAfterTimestamp.Time.UTC().Unix()-now.UTC().Unix(), 0)
}

// ResetCheckAt tells when Sync must be called again for a Running VMI so
// that CountRunningFailuresWithin can clear the record; ok is false when no
// such check is needed.
func (t Tracker) ResetCheckAt(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) (at time.Time, ok bool) {
	if t.Policy.CountRunningFailuresWithin <= 0 || vm.Status.StartFailure == nil || vmi == nil || vmi.IsFinal() {
		return time.Time{}, false
	}
	runningAt, ran := PhaseTime(vmi, v1.Running)
	if !ran {
		return time.Time{}, false
	}
	return runningAt.Add(t.Policy.Scaled(t.Policy.CountRunningFailuresWithin)), true
}

// PhaseTime returns when the VMI first entered phase, from its
// phaseTransitionTimestamps.
func PhaseTime(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase) (time.Time, bool) {
	if vmi == nil {
		return time.Time{}, false
	}
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == phase {
			return ts.PhaseTransitionTimestamp.Time, true
		}
	}
	return time.Time{}, false
}
