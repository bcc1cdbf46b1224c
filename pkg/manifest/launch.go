package manifest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The kinds of the cluster objects a VirtualMachine may name, which a
// launcher's manifest file may carry beside the VM, as `kubectl apply -f`
// takes them.
const (
	KindInstancetype        = "VirtualMachineInstancetype"
	KindClusterInstancetype = "VirtualMachineClusterInstancetype"
	KindPreference          = "VirtualMachinePreference"
	KindClusterPreference   = "VirtualMachineClusterPreference"
	// KindConfigMap holds the scripts a hook sidecar's configMap names.
	KindConfigMap = "ConfigMap"
)

// objectKinds are the five, in the order messages list them.
var objectKinds = []string{KindInstancetype, KindClusterInstancetype, KindPreference, KindClusterPreference, KindConfigMap}

// Object is an instancetype, a preference or a ConfigMap document.
type Object struct {
	// Kind is one of the kinds above; Name and Namespace are the
	// object's (Namespace "default" for the namespaced kinds that name
	// none, empty for the cluster-wide ones).
	Kind, Name, Namespace string
	// Source names it in messages: "FILE (document N)".
	Source string
	// JSON is the document.
	JSON []byte
}

// Launch is a launcher's manifest file taken apart: the one VM or VMI
// document, and the instancetypes and preferences beside it.
type Launch struct {
	// Machine is the VirtualMachine or VirtualMachineInstance document (as
	// JSON), which Read decodes.
	Machine []byte
	// Objects are the instancetype and preference documents.
	Objects []Object
}

// Split takes a launcher's manifest apart: exactly one VirtualMachine or
// VirtualMachineInstance document, and any number of (Cluster)Instancetype,
// (Cluster)Preference and ConfigMap documents; any other document is an error naming
// its number and kind. A file that is not valid YAML or JSON, or has no
// document, is returned as it is, for Read to say what is wrong with it.
func Split(data []byte, input string) (*Launch, error) {
	parts, err := Documents(data, input)
	if err != nil || len(parts) == 0 {
		return &Launch{Machine: data}, nil
	}
	if len(parts) == 1 {
		return &Launch{Machine: parts[0].JSON}, nil
	}
	l := &Launch{}
	machineDoc := 0
	for _, p := range parts {
		kind := kindOf(p.JSON)
		switch {
		case kind == "VirtualMachine" || kind == "VirtualMachineInstance":
			if machineDoc != 0 {
				return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("documents %d and %d are both a VirtualMachine or VirtualMachineInstance: one launch runs one VMI", machineDoc, p.N)}
			}
			machineDoc, l.Machine = p.N, p.JSON
		case slices.Contains(objectKinds, kind):
			o, _, err := ObjectOf(p, input)
			if err != nil {
				return nil, &InvalidError{Input: input, Msg: err.Error()}
			}
			l.Objects = append(l.Objects, o)
		default:
			return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("document %d: %s: a launch takes one VirtualMachine or VirtualMachineInstance and the %s objects it names", p.N, describeKind(kind), strings.Join(objectKinds, ", "))}
		}
	}
	if machineDoc == 0 {
		return nil, &InvalidError{Input: input, Msg: fmt.Sprintf("%d documents but no VirtualMachine or VirtualMachineInstance: want one to run", len(parts))}
	}
	return l, nil
}

// ReadObjectDir reads the instancetypes, preferences and ConfigMaps in the YAML and
// JSON files (*.yaml, *.yml, *.json) of dir, the launcher's --instancetypes
// folder. Documents of other kinds are left out: the folder may be one
// that `kubectl apply -f` takes whole.
func ReadObjectDir(dir string) ([]Object, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		parts, err := Documents(data, path)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			o, ok, err := ObjectOf(p, path)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if ok {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// Ref is an instancetype or preference a VirtualMachine names.
type Ref struct {
	// Field is spec.instancetype or spec.preference.
	Field string
	// Kind is the object's kind as the VM names it, KubeVirt's default
	// (the cluster-wide kind) when it names none; Name its name; Namespace
	// the VM's for the namespaced kinds.
	Kind, Name, Namespace string
}

// Refs returns the instancetype and preference a VirtualMachine document
// (JSON, from Split) names; none for a VMI.
func Refs(machine []byte) []Ref {
	var vm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Instancetype *struct{ Kind, Name string } `json:"instancetype"`
			Preference   *struct{ Kind, Name string } `json:"preference"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(machine, &vm); err != nil || vm.Kind != "VirtualMachine" {
		return nil
	}
	ns := vm.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	var refs []Ref
	add := func(field string, m *struct{ Kind, Name string }, namespaced, cluster string) {
		if m == nil {
			return
		}
		r := Ref{Field: field, Kind: kindName(m.Kind, namespaced, cluster), Name: m.Name}
		if r.Kind == namespaced {
			r.Namespace = ns
		}
		refs = append(refs, r)
	}
	add("spec.instancetype", vm.Spec.Instancetype, KindInstancetype, KindClusterInstancetype)
	add("spec.preference", vm.Spec.Preference, KindPreference, KindClusterPreference)
	return refs
}

// Find returns the object r names: from objs, the first that matches.
func (r Ref) Find(objs []Object) (Object, bool) {
	for _, o := range objs {
		if o.Kind == r.Kind && o.Name == r.Name && o.Namespace == r.Namespace {
			return o, true
		}
	}
	return Object{}, false
}

// kindName maps a matcher's kind as KubeVirt's finders read it (any case,
// singular or plural resource name, empty for the cluster-wide kind) to
// the object kind; a kind that is none of these is returned as written.
func kindName(kind, namespaced, cluster string) string {
	switch strings.ToLower(kind) {
	case strings.ToLower(namespaced), strings.ToLower(namespaced) + "s":
		return namespaced
	case "", strings.ToLower(cluster), strings.ToLower(cluster) + "s":
		return cluster
	}
	return kind
}

// ObjectOf reads document p of input (from Documents) as an instancetype,
// a preference or a ConfigMap; ok is false for a document of another kind. The error
// names the document, its kind and the field.
func ObjectOf(p Part, input string) (o Object, ok bool, err error) {
	kind := kindOf(p.JSON)
	if !slices.Contains(objectKinds, kind) {
		return Object{}, false, nil
	}
	o, err = object(p, kind, fmt.Sprintf("%s (document %d)", input, p.N))
	return o, err == nil, err
}

// object reads an instancetype or preference document's identity.
func object(p Part, kind, source string) (Object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.JSON, &head); err != nil {
		return Object{}, fmt.Errorf("document %d: %s: %w", p.N, kind, err)
	}
	want := "instancetype.kubevirt.io/v1beta1"
	if kind == KindConfigMap {
		want = "v1"
	}
	if head.APIVersion != want {
		return Object{}, fmt.Errorf("document %d: %s: field apiVersion: got %q, want %q", p.N, kind, head.APIVersion, want)
	}
	if head.Metadata.Name == "" {
		return Object{}, fmt.Errorf("document %d: %s: field metadata.name: must be set", p.N, kind)
	}
	o := Object{Kind: kind, Name: head.Metadata.Name, Source: source, JSON: p.JSON}
	if kind == KindInstancetype || kind == KindPreference || kind == KindConfigMap {
		o.Namespace = head.Metadata.Namespace
		if o.Namespace == "" {
			o.Namespace = "default"
		}
	}
	return o, nil
}

// kindOf reads a document's kind ("" when it has none).
func kindOf(js []byte) string {
	var head struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(js, &head) // a document that is not an object has no kind
	return head.Kind
}

func describeKind(kind string) string {
	if kind == "" {
		return "no kind"
	}
	return fmt.Sprintf("kind %q", kind)
}
