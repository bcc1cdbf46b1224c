package faults

import (
	"strconv"
	"strings"
	"time"
)

// Spec is one parsed, validated fault request: the fault, its modifiers and
// its own parameters with defaults filled in.
type Spec struct {
	// Fault is the catalog name of the fault.
	Fault string
	// Probability is the chance, in percent (0 to 100), that the fault fires
	// on an attempt it applies to. Default 100.
	Probability float64
	// Count is the most times the fault fires across the attempts of one VM;
	// 0 means unlimited.
	Count int
	// Delay is the delay modifier as given (not yet added to `after`).
	Delay time.Duration
	// Attempts is the set of launch attempts the fault applies to.
	Attempts AttemptSet

	params map[string]any // the fault's own params, defaults filled in
}

// def returns the catalog entry of the spec's fault.
func (s Spec) def() *Definition { return &catalog[lookup(s.Fault)] }

// Param returns the canonical form of one of the fault's own parameters
// (defaults included), or "" if the fault has no such parameter.
func (s Spec) Param(name string) string {
	for _, p := range s.def().Params {
		if p.Name == name {
			return p.kind.format(s.params[name])
		}
	}
	return ""
}

// Params returns every own parameter of the fault in canonical form, defaults
// included, keyed by name.
func (s Spec) Params() map[string]string {
	out := make(map[string]string, len(s.params))
	for _, p := range s.def().Params {
		out[p.Name] = p.kind.format(s.params[p.Name])
	}
	return out
}

// Value renders the spec as a canonical annotation value:
// [P%][N*][param=value,...], leaving out whatever is at its default. Parsing
// it again gives the same Spec.
func (s Spec) Value() string {
	var b strings.Builder
	if s.Probability != 100 {
		b.WriteString(strconv.FormatFloat(s.Probability, 'f', -1, 64) + "%")
	}
	if s.Count > 0 {
		b.WriteString(strconv.Itoa(s.Count) + "*")
	}
	var items []string
	for _, p := range s.def().Params {
		v := s.params[p.Name]
		if p.Required || p.kind.format(v) != p.kind.format(p.def) {
			items = append(items, p.Name+"="+p.kind.format(v))
		}
	}
	if s.Delay != 0 {
		items = append(items, "delay="+s.Delay.String())
	}
	if !s.Attempts.All() {
		items = append(items, "attempts="+s.Attempts.String())
	}
	b.WriteString(strings.Join(items, ","))
	return b.String()
}

// String renders the spec as a canonical --fault term: name or name=value.
func (s Spec) String() string {
	if v := s.Value(); v != "" {
		return s.Fault + "=" + v
	}
	return s.Fault
}

// effectiveDelay is the time from the injection point to the action: delay,
// plus `after` for faults that have one.
func (s Spec) effectiveDelay() time.Duration {
	d := s.Delay
	if after, ok := s.params["after"]; ok {
		d += after.(time.Duration)
	}
	return d
}
