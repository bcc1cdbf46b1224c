package controller

import (
	"context"
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
	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// Manifest is one VirtualMachine read from a file.
type Manifest struct {
	// Path is the file it came from.
	Path string
	// Doc is the 1-based document number within the file.
	Doc int
	// VM is the validated VirtualMachine, namespace defaulted.
	VM *v1.VirtualMachine
	// Template is the VMI template with the instancetype and preference
	// the VM names applied (by vmexpandexec, with KubeVirt's code), which
	// the VM's VMIs are made from; nil when the VM names neither, and its
	// spec.template is used as written. VM keeps spec.instancetype and
	// spec.preference and its template as written, as KubeVirt's VM object
	// does.
	Template *v1.VirtualMachineInstanceTemplateSpec
	// Digest is the SHA-256 of the VM document's bytes (not of the objects
	// it names: like KubeVirt's controller revisions, a VM keeps the
	// expansion it was started with until its own document changes).
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
// allowed, separated by "---"; VMs and the instancetypes and preferences
// they name, as `kubectl apply -f` takes them), expands the VMs with exp
// and checks that no two VMs share a namespace/name.
func ReadManifests(ctx context.Context, exp vmexpandexec.Expander, paths []string) ([]Manifest, error) {
	var all []Manifest
	seen := map[Key]Manifest{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading manifest: %w", err)
		}
		ms, err := ParseManifests(ctx, exp, p, data)
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
// more YAML or JSON documents, read by pkg/manifest) and expands the
// instancetype and preference each names with exp, the objects taken from
// the same file or exp's folder. Any other kind of document is an error.
func ParseManifests(ctx context.Context, exp vmexpandexec.Expander, path string, data []byte) ([]Manifest, error) {
	docs, err := manifest.Documents(data, path)
	if err != nil {
		return nil, err
	}
	var objs []manifest.Object
	var vmDocs []manifest.Part
	for _, d := range docs {
		o, ok, err := manifest.ObjectOf(d, path)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: %w", path, err)
		case ok && o.Kind == manifest.KindConfigMap:
			return nil, fmt.Errorf("%s: a ConfigMap (the script of a hook sidecar's configMap): the controller hands its launchers the VMI alone; run such a VM with virt-launcher, which reads the ConfigMap beside it", source(path, d.N))
		case ok:
			objs = append(objs, o)
		default:
			vmDocs = append(vmDocs, d)
		}
	}
	var out []Manifest
	for _, d := range vmDocs {
		vm, err := parseVM(d.JSON)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source(path, d.N), err)
		}
		sum := sha256.Sum256(d.YAML)
		m := Manifest{Path: path, Doc: d.N, VM: vm, Digest: hex.EncodeToString(sum[:])}
		if m.Template, err = expand(ctx, exp, d.JSON, objs, path); err != nil {
			return nil, err
		}
		out = append(out, m)
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
		return nil, fmt.Errorf("field kind: got %q, want VirtualMachine (or an instancetype or preference it names: %s, %s, %s, %s)", head.Kind,
			manifest.KindInstancetype, manifest.KindClusterInstancetype, manifest.KindPreference, manifest.KindClusterPreference)
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

// expand returns the VMI template of the VM document js with the
// instancetype and preference it names applied; nil when it names neither.
func expand(ctx context.Context, exp vmexpandexec.Expander, js []byte, objs []manifest.Object, path string) (*v1.VirtualMachineInstanceTemplateSpec, error) {
	if len(manifest.Refs(js)) == 0 {
		return nil, nil
	}
	out, err := exp.Expand(ctx, js, objs, path)
	if err != nil {
		return nil, err
	}
	var vm v1.VirtualMachine
	if err := json.Unmarshal(out, &vm); err != nil {
		return nil, fmt.Errorf("%s: reading %s's answer: %w", path, vmexpandexec.ExpanderName, err)
	}
	if vm.Spec.Template == nil {
		return nil, fmt.Errorf("%s: %s answered a VirtualMachine without spec.template", path, vmexpandexec.ExpanderName)
	}
	return vm.Spec.Template, nil
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
	w.rec.VM, w.rec.Template, w.rec.ManifestDigest = vm, m.Template.DeepCopy(), m.Digest
	msg := fmt.Sprintf("spec reloaded from %s (generation %d)", m.Source(), vm.Generation)
	w.note(Event{Event: EventManifestChanged, Message: msg})
	return msg
}
