package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// AnnotationPrefix starts every fault annotation key; the rest of the key is
// the fault name: faults.crashloop.dev/qemu-kill.
const AnnotationPrefix = "faults.crashloop.dev/"

// FailFastAnnotation is KubeVirt's functional-test annotation that makes
// virt-launcher crash on purpose. It is not part of a Plan; see
// WantsSimulatedCrash.
const FailFastAnnotation = "kubevirt.io/func-test-virt-launcher-fail-fast"

// WantsSimulatedCrash reports whether the annotations carry
// FailFastAnnotation. As in KubeVirt, presence is enough, whatever the value.
// The launcher treats it like launcher-crash at before-libvirt.
func WantsSimulatedCrash(annotations map[string]string) bool {
	_, ok := annotations[FailFastAnnotation]
	return ok
}

// Plan is the validated set of faults asked for one VMI, at most one Spec per
// fault, in catalog order. The zero Plan asks for no fault.
type Plan struct {
	entries []entry
}

type entry struct {
	spec   Spec
	source string
}

// Parse builds the Plan from a VMI's annotations and the launcher's --fault
// flag values. Annotations without AnnotationPrefix are ignored. Each flag is
// "<fault>[=<value>]" with the same value grammar as an annotation. Every
// problem is reported, as *Error values joined with errors.Join; on error the
// Plan is empty.
func Parse(annotations map[string]string, flags []string) (Plan, error) {
	var (
		plan Plan
		errs []error
		seen = map[string]string{} // fault name -> source that asked for it
	)
	add := func(source, name, value string) {
		if prev, dup := seen[name]; dup {
			errs = append(errs, &Error{Source: source, Kind: ErrDuplicateFault, Part: name,
				Detail: "also given by " + prev + "; give each fault once"})
			return
		}
		if lookup(name) >= 0 {
			seen[name] = source
		}
		spec, err := parseTerm(source, name, value)
		if err != nil {
			errs = append(errs, err)
			return
		}
		plan.entries = append(plan.entries, entry{spec: spec, source: source})
	}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		add(fmt.Sprintf("annotation %q", k), strings.TrimPrefix(k, AnnotationPrefix), annotations[k])
	}
	for _, f := range flags {
		name, value, _ := strings.Cut(f, "=")
		add(fmt.Sprintf("--fault %q", f), name, value)
	}
	if len(errs) > 0 {
		return Plan{}, errors.Join(errs...)
	}
	slices.SortFunc(plan.entries, func(a, b entry) int { return lookup(a.spec.Fault) - lookup(b.spec.Fault) })
	return plan, nil
}

// Empty reports whether the plan asks for no fault.
func (p Plan) Empty() bool { return len(p.entries) == 0 }

// specs returns the plan's fault specs in catalog order.
func (p Plan) specs() []Spec {
	out := make([]Spec, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.spec
	}
	return out
}

// Flags renders the plan as canonical --fault values; Parse(nil, p.Flags())
// gives the same plan (up to the recorded sources).
func (p Plan) Flags() []string {
	out := make([]string, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.spec.String()
	}
	return out
}

// Annotations renders the plan as canonical fault annotations; Parse of them
// gives the same plan (up to the recorded sources).
func (p Plan) Annotations() map[string]string {
	out := make(map[string]string, len(p.entries))
	for _, e := range p.entries {
		out[AnnotationPrefix+e.spec.Fault] = e.spec.Value()
	}
	return out
}

// String renders the plan as its canonical --fault terms separated by spaces,
// or "" for an empty plan.
func (p Plan) String() string { return strings.Join(p.Flags(), " ") }

// Summary returns the plan as the launcher's Scheduled event lists it,
// one entry per fault.
func (p Plan) Summary() []launcherapi.FaultSpec {
	out := make([]launcherapi.FaultSpec, len(p.entries))
	for i, e := range p.entries {
		s := e.spec
		out[i] = launcherapi.FaultSpec{
			Fault: s.Fault, Term: s.String(), Source: e.source,
			Probability: s.Probability, Count: s.Count,
			Attempts: s.Attempts.String(), Params: s.Params(),
		}
		if s.Delay != 0 {
			out[i].Delay = s.Delay.String()
		}
		if len(out[i].Params) == 0 {
			out[i].Params = nil
		}
	}
	return out
}

// planEntry is one entry of a plan's JSON form: its canonical term and
// where it was asked.
type planEntry struct {
	Term   string `json:"term"`
	Source string `json:"source"`
}

// MarshalJSON encodes the plan as its canonical terms and their sources,
// the form in which the launcher's converter hands it to its runner.
func (p Plan) MarshalJSON() ([]byte, error) {
	out := make([]planEntry, len(p.entries))
	for i, e := range p.entries {
		out[i] = planEntry{Term: e.spec.String(), Source: e.source}
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes what MarshalJSON wrote. The terms are canonical,
// so they give back the same specs (FuzzParse checks the round trip).
func (p *Plan) UnmarshalJSON(data []byte) error {
	var in []planEntry
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("decoding a fault plan: %w", err)
	}
	plan := Plan{entries: make([]entry, 0, len(in))}
	for _, e := range in {
		name, value, _ := strings.Cut(e.Term, "=")
		spec, err := parseTerm(e.Source, name, value)
		if err != nil {
			return fmt.Errorf("decoding a fault plan: %w", err)
		}
		plan.entries = append(plan.entries, entry{spec: spec, source: e.Source})
	}
	*p = plan
	return nil
}

// ValidateDisks checks the plan against the VMI's disk names: a
// disk-io-error that names a disk must name one of them, and one that does
// not needs at least one disk. The launcher calls it once it has read the VMI.
func (p Plan) ValidateDisks(disks []string) error {
	for _, e := range p.entries {
		if _, ok := e.spec.params["disk"]; !ok {
			continue
		}
		disk := e.spec.params["disk"].(string)
		if disk == "" && len(disks) > 0 || slices.Contains(disks, disk) {
			continue
		}
		part, detail := "disk="+disk, "the VMI has no such disk"
		if disk == "" {
			part, detail = "disk", "the VMI has no disk to fail"
		}
		return &Error{Source: e.source, Kind: ErrUnknownDisk, Part: part, Detail: detail, Allowed: disks}
	}
	return nil
}
