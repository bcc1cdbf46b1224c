package manifest

import (
	"fmt"
	"slices"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

// vmOnlyFields are VirtualMachine spec fields that do not change the one
// VMI a launch runs: they steer the VM controller (restarts, data volume
// creation), which a single launch is not. Read reports them as ignored.
// (dataVolumeTemplates are not among them: Document.DataVolumeTemplates
// carries them to the launcher, which imports them into the claim folder.)
var vmOnlyFields = []string{"runStrategy", "running", "updateVolumesStrategy"}

// vmRefused are VirtualMachine spec fields that change the VMI through
// cluster objects, which Read does not expand (pkg/vmexpandexec's Expander
// does, before Read).
var vmRefused = map[string]string{
	"instancetype": "is a cluster object that must be expanded first: virt-launcher does (with virt-launcher-expand), from the manifest's file or --instancetypes",
	"preference":   "is a cluster object that must be expanded first: virt-launcher does (with virt-launcher-expand), from the manifest's file or --instancetypes",
}

// refusedRef names the object a VM's instancetype or preference matcher
// points at, with KubeVirt's default kind (the cluster-wide one).
func refusedRef(field string, m map[string]any) string {
	kind, _ := m["kind"].(string)
	name, _ := m["name"].(string)
	if kind == "" {
		kind = map[string]string{"instancetype": "VirtualMachineClusterInstancetype", "preference": "VirtualMachineClusterPreference"}[field]
	}
	return fmt.Sprintf("%s %q %s", kind, name, vmRefused[field])
}

// Read decodes the manifest a launcher is given: a VirtualMachineInstance,
// or a VirtualMachine whose spec.template becomes the VMI, as KubeVirt's VM
// controller creates it (name and namespace from the VM, labels and
// annotations from the template, a fresh UID). Cluster-only fields of a
// saved live object are accepted and listed in Document.Ignored; anything
// else unknown is an error naming the field.
func Read(data []byte, input string) (*v1.VirtualMachineInstance, *Document, error) {
	const want = "VirtualMachineInstance or VirtualMachine"
	raw, err := parse(data, input, want)
	if err != nil {
		return nil, nil, err
	}
	kind, err := checkKind(raw, input, "VirtualMachineInstance", "VirtualMachine")
	if err != nil {
		return nil, nil, err
	}
	if kind == "VirtualMachineInstance" {
		return vmiFrom(raw, input)
	}
	vm := &v1.VirtualMachine{}
	ignored, err := strict(raw, input, kind, vm)
	if err != nil {
		return nil, nil, err
	}
	if err := named(input, &vm.ObjectMeta); err != nil {
		return nil, nil, err
	}
	spec, _ := raw["spec"].(map[string]any)
	for _, f := range []string{"instancetype", "preference"} {
		if spec[f] != nil {
			m, _ := spec[f].(map[string]any)
			return nil, nil, &InvalidError{Input: input, Field: "spec." + f, Msg: refusedRef(f, m)}
		}
	}
	for _, f := range vmOnlyFields {
		if spec[f] != nil {
			ignored = append(ignored, "spec."+f)
		}
	}
	if vm.Spec.Template == nil {
		return nil, nil, &InvalidError{Input: input, Field: "spec.template", Msg: "must be set: it is the VMI the VirtualMachine runs"}
	}
	tmpl, _ := spec["template"].(map[string]any)
	tmplMeta, _ := tmpl["metadata"].(map[string]any)
	meta := map[string]any{"name": vm.Name, "namespace": vm.Namespace}
	for _, k := range []string{"labels", "annotations"} {
		if tmplMeta[k] != nil {
			meta[k] = tmplMeta[k]
		}
	}
	vmiRaw := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta}
	if tmpl["spec"] != nil {
		vmiRaw["spec"] = tmpl["spec"]
	}
	vmi := &v1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.Name, Namespace: vm.Namespace,
			Labels: vm.Spec.Template.ObjectMeta.Labels, Annotations: vm.Spec.Template.ObjectMeta.Annotations,
			UID: types.UID(uuid.NewString()),
		},
		Spec: vm.Spec.Template.Spec,
	}
	slices.Sort(ignored)
	return vmi, &Document{Input: input, Kind: kind, Raw: vmiRaw, Ignored: ignored, DataVolumeTemplates: vm.Spec.DataVolumeTemplates}, nil
}

func vmiFrom(raw map[string]any, input string) (*v1.VirtualMachineInstance, *Document, error) {
	vmi := &v1.VirtualMachineInstance{}
	ignored, err := strict(raw, input, "VirtualMachineInstance", vmi)
	if err != nil {
		return nil, nil, err
	}
	if err := named(input, &vmi.ObjectMeta); err != nil {
		return nil, nil, err
	}
	return vmi, &Document{Input: input, Kind: "VirtualMachineInstance", Raw: raw, Ignored: ignored}, nil
}

// named refuses an object without a name and puts it in the default
// namespace when it names none, as kubectl would.
func named(input string, m *metav1.ObjectMeta) error {
	if m.Name == "" {
		return &InvalidError{Input: input, Field: "metadata.name", Msg: "must be set"}
	}
	if m.Namespace == "" {
		m.Namespace = "default"
	}
	return nil
}
