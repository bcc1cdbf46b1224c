package faults

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// DecideInput identifies one launch attempt of one VM.
type DecideInput struct {
	// Seed is the launch's seed (the launcher's --seed).
	Seed launcherapi.Seed
	// Key is the VM identity, namespace/name. It must stay the same across
	// the attempts of one VM; the VMI UID does not (a fresh VMI is made for
	// every attempt), so it must not be used here.
	Key string
	// Attempt is the 1-based launch attempt. Values below 1 are taken as 1.
	Attempt int
}

// Decision is one fault that fires on an attempt, with everything the
// launcher needs to apply it.
type Decision struct {
	// Fault is the catalog name of the fault.
	Fault string
	// Point is where in the lifecycle the launcher applies it.
	Point Point
	// Delay is the effective time from Point to the action: the delay
	// modifier, plus `after` for faults that have one. The typed Action
	// carries the same value (as Delay or After); the launcher waits once.
	Delay time.Duration
	// Action is the typed fault, one of the types in actions.go.
	Action Action
	// Spec is the spec that fired.
	Spec Spec
}

// Decisions are the faults that fire on one attempt, in catalog order.
type Decisions []Decision

// Decide returns the faults of the plan that fire on the given attempt.
//
// A fault fires on attempt A iff A is in its attempts set, its probability
// draw for A succeeds, and, when it has a count N, fewer than N of the
// attempts 1..A-1 fired by the same two rules. The draw for an attempt is a
// pure function of (Seed, Key, fault name, attempt), so the count needs no
// state: earlier attempts are replayed. The cost is O(A) draws for a fault
// with both a count and a probability below 100%.
func (p Plan) Decide(in DecideInput) Decisions {
	if in.Attempt < 1 {
		in.Attempt = 1
	}
	var out Decisions
	for _, e := range p.entries {
		s := e.spec
		if !s.Attempts.Contains(in.Attempt) || !draw(in.Seed, in.Key, s.Fault, in.Attempt, s.Probability) {
			continue
		}
		if s.Count > 0 && firedBefore(s, in) >= s.Count {
			continue
		}
		delay := s.effectiveDelay()
		action, point := s.def().action(s, delay)
		out = append(out, Decision{Fault: s.Fault, Point: point, Delay: delay, Action: action, Spec: s})
	}
	return out
}

// firedBefore counts the attempts 1..in.Attempt-1 on which s fired by
// attempts set and probability, stopping once it reaches s.Count.
func firedBefore(s Spec, in DecideInput) int {
	if s.Probability >= 100 {
		return s.Attempts.countBelow(in.Attempt)
	}
	n := 0
	for a := 1; a < in.Attempt && n < s.Count; a++ {
		if s.Attempts.Contains(a) && draw(in.Seed, in.Key, s.Fault, a, s.Probability) {
			n++
		}
	}
	return n
}

// draw reports whether a fault with the given probability (percent) fires on
// an attempt. The random number comes from a PCG seeded with SHA-256 of
// (seed, key, fault, attempt); no global state, no clock.
func draw(seed launcherapi.Seed, key, fault string, attempt int, probability float64) bool {
	if probability >= 100 {
		return true
	}
	if probability <= 0 {
		return false
	}
	h := sha256.New()
	var buf [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	h.Write([]byte("crashloop/faults/v1"))
	put(uint64(seed))
	put(uint64(len(key)))
	h.Write([]byte(key))
	put(uint64(len(fault)))
	h.Write([]byte(fault))
	put(uint64(attempt))
	sum := h.Sum(nil)
	r := rand.New(rand.NewPCG(binary.BigEndian.Uint64(sum[0:8]), binary.BigEndian.Uint64(sum[8:16])))
	return r.Float64()*100 < probability
}

// Has reports whether the named fault fires.
func (d Decisions) Has(fault string) bool {
	_, ok := d.Get(fault)
	return ok
}

// Get returns the decision for the named fault, if it fires.
func (d Decisions) Get(fault string) (Decision, bool) {
	for _, x := range d {
		if x.Fault == fault {
			return x, true
		}
	}
	return Decision{}, false
}

// At returns the decisions that apply at the given lifecycle point.
func (d Decisions) At(p Point) Decisions {
	var out Decisions
	for _, x := range d {
		if x.Point == p {
			out = append(out, x)
		}
	}
	return out
}

// KernelArgs returns the guest kernel command-line directives the firing
// faults need (harness.panic=N, harness.poweroff=N, harness.noready,
// harness.readdisk), in catalog order.
func (d Decisions) KernelArgs() []string {
	var out []string
	for _, x := range d {
		if k, ok := x.Action.(interface{ KernelArg() string }); ok {
			out = append(out, k.KernelArg())
		}
	}
	return out
}

// Summary returns the decisions as the launcher's Scheduled event lists
// them.
func (d Decisions) Summary() []launcherapi.FaultDecision {
	out := make([]launcherapi.FaultDecision, len(d))
	for i, x := range d {
		out[i] = launcherapi.FaultDecision{Fault: x.Fault, Point: string(x.Point), Params: x.Spec.Params()}
		if x.Delay != 0 {
			out[i].Delay = x.Delay.String()
		}
		if len(out[i].Params) == 0 {
			out[i].Params = nil
		}
	}
	return out
}

// String renders the decisions as "fault(param=value,...)" items separated by
// spaces, all parameters shown; "" when nothing fires.
func (d Decisions) String() string {
	parts := make([]string, len(d))
	for i, x := range d {
		var ps []string
		for _, p := range x.Spec.def().Params {
			ps = append(ps, p.Name+"="+x.Spec.Param(p.Name))
		}
		if x.Delay != 0 {
			ps = append(ps, "effective-delay="+x.Delay.String())
		}
		parts[i] = x.Fault + "(" + strings.Join(ps, ",") + ")"
	}
	return strings.Join(parts, " ")
}
