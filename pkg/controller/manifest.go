package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// Manifest is one VirtualMachine read from a file.
type Manifest struct {
	// Path is the file it came from.
	Path string
	// Doc is the 1-based document number within the file.
	Doc int
	// VM is the validated VirtualMachine, namespace defaulted.
	VM *v1.VirtualMachine
	// Digest is the SHA-256 of the document's bytes.
	Digest string
}

// Source names the manifest in messages: "path" or "path (document N)".
func (m Manifest) Source() string { return source(m.Path, m.Doc) }

func source(path string, doc int) string {
	if doc <= 1 {
		return path
	}
	return fmt.Sprintf("%s (document %d)", path, doc)
}

// SupportedRunStrategies lists the run strategies this controller reconciles.
func SupportedRunStrategies() []v1.VirtualMachineRunStrategy {
	return []v1.VirtualMachineRunStrategy{
		v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure, v1.RunStrategyManual, v1.RunStrategyHalted, v1.RunStrategyOnce,
	}
}

// ReadManifests reads every file (several YAML documents per file are
// allowed, separated by "---") and checks that no two VMs share a
// namespace/name.
func ReadManifests(paths []string) ([]Manifest, error) {
	var all []Manifest
	seen := map[Key]Manifest{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading manifest: %w", err)
		}
		ms, err := ParseManifests(p, data)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			k := KeyOf(m.VM)
			if prev, dup := seen[k]; dup {
				return nil, fmt.Errorf("duplicate VirtualMachine %s: defined in %s and in %s; each VM needs its own namespace/name", k, prev.Source(), m.Source())
			}
			seen[k] = m
			all = append(all, m)
		}
	}
	if len(all) == 0 {
		return nil, errors.New("no VirtualMachine manifests given")
	}
	return all, nil
}

// ParseManifests decodes the VirtualMachines in one file's bytes (one or
// more YAML or JSON documents, read by pkg/manifest).
func ParseManifests(path string, data []byte) ([]Manifest, error) {
	docs, err := manifest.Documents(data, path)
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, d := range docs {
		vm, err := parseVM(d.JSON)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source(path, d.N), err)
		}
		sum := sha256.Sum256(d.YAML)
		out = append(out, Manifest{Path: path, Doc: d.N, VM: vm, Digest: hex.EncodeToString(sum[:])})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no VirtualMachine in the file", path)
	}
	return out, nil
}

// parseVM decodes one document (as JSON) into a VirtualMachine, strictly
// (an unknown field is an error naming it), and validates what the
// controller relies on.
func parseVM(js []byte) (*v1.VirtualMachine, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("want a VirtualMachine object: %w", err)
	}
	switch head.Kind {
	case "VirtualMachine":
	case "VirtualMachineInstance":
		return nil, errors.New("field kind: got VirtualMachineInstance, want VirtualMachine: virt-controller runs VirtualMachines; put the VMI's metadata and spec under spec.template of a VirtualMachine, or run the VMI directly with virt-launcher")
	case "":
		return nil, errors.New("field kind: missing, want VirtualMachine")
	default:
		return nil, fmt.Errorf("field kind: got %q, want VirtualMachine", head.Kind)
	}
	if head.APIVersion != "kubevirt.io/v1" {
		return nil, fmt.Errorf("field apiVersion: got %q, want \"kubevirt.io/v1\"", head.APIVersion)
	}
	// pkg/manifest checks every field against the kubevirt.io/api types:
	// DisallowUnknownFields alone misses typos under the VMI template,
	// whose spec type has its own UnmarshalJSON.
	vm, _, err := manifest.VM(js, "VirtualMachine")
	if err != nil {
		var inv *manifest.InvalidError
		if errors.As(err, &inv) {
			if inv.Field != "" {
				return nil, fmt.Errorf("field %s: %s", inv.Field, inv.Msg)
			}
			return nil, errors.New(inv.Msg)
		}
		return nil, fmt.Errorf("decoding VirtualMachine: %w", err)
	}
	if vm.Spec.Instancetype != nil || vm.Spec.Preference != nil {
		// Dropping them would run another VM than the manifest's.
		field := "spec.instancetype"
		if vm.Spec.Instancetype == nil {
			field = "spec.preference"
		}
		return nil, fmt.Errorf("field %s: virt-controller does not expand instancetypes and preferences yet; write them into spec.template, or run the VM with virt-launcher, which expands them", field)
	}
	if vm.Status.StartFailure != nil || vm.Status.PrintableStatus != "" {
		// A status in a manifest would masquerade as the controller's record.
		vm.Status = v1.VirtualMachineStatus{}
	}
	if vm.Namespace == "" {
		vm.Namespace = "default"
	}
	if err := validateVM(vm); err != nil {
		return nil, err
	}
	return vm, nil
}

func validateVM(vm *v1.VirtualMachine) error {
	if vm.Name == "" {
		return errors.New("field metadata.name: must be set")
	}
	if errs := validation.IsDNS1123Subdomain(vm.Name); len(errs) > 0 {
		return fmt.Errorf("field metadata.name: %q: %s", vm.Name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(vm.Namespace); len(errs) > 0 {
		return fmt.Errorf("field metadata.namespace: %q: %s", vm.Namespace, strings.Join(errs, "; "))
	}
	if vm.Spec.Template == nil {
		return errors.New("field spec.template: must be set (the VMI to create)")
	}
	if vm.Spec.Running != nil && vm.Spec.RunStrategy != nil {
		return errors.New("fields spec.running and spec.runStrategy: set only one (spec.runStrategy is preferred)")
	}
	if vm.Spec.RunStrategy != nil {
		ok := false
		for _, s := range SupportedRunStrategies() {
			ok = ok || *vm.Spec.RunStrategy == s
		}
		if !ok {
			return fmt.Errorf("field spec.runStrategy: %q is not supported; allowed values are %s", *vm.Spec.RunStrategy, strategyList())
		}
	}
	return nil
}

func strategyList() string {
	var names []string
	for _, s := range SupportedRunStrategies() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// applyManifest takes a changed manifest's spec, keeping the status: an
// edited template does not clear the start-failure record, and the next
// VMI is made from the new template.
func (w *worker) applyManifest(m *Manifest) string {
	if m.Digest == w.rec.ManifestDigest {
		return "unchanged"
	}
	old := w.rec.VM
	vm := m.VM.DeepCopy()
	vm.Status = old.Status
	vm.UID, vm.CreationTimestamp, vm.Generation = old.UID, old.CreationTimestamp, old.Generation+1
	w.rec.VM, w.rec.ManifestDigest = vm, m.Digest
	msg := fmt.Sprintf("spec reloaded from %s (generation %d)", m.Source(), vm.Generation)
	w.note(Event{Event: EventManifestChanged, Message: msg})
	return msg
}
