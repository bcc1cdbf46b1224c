package vmexpand

import (
	"fmt"

	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kubevirt.io/kubevirt/pkg/defaults"
	instancetypeannotations "kubevirt.io/kubevirt/pkg/instancetype/annotations"
	"kubevirt.io/kubevirt/pkg/instancetype/apply"
	"kubevirt.io/kubevirt/pkg/instancetype/conflict"
	instancetypefind "kubevirt.io/kubevirt/pkg/instancetype/find"
	preferenceannotations "kubevirt.io/kubevirt/pkg/instancetype/preference/annotations"
	preferenceapply "kubevirt.io/kubevirt/pkg/instancetype/preference/apply"
	preferencefind "kubevirt.io/kubevirt/pkg/instancetype/preference/find"
	"kubevirt.io/kubevirt/pkg/instancetype/preference/requirements"
	"kubevirt.io/kubevirt/pkg/instancetype/preference/validation"
	"kubevirt.io/kubevirt/pkg/network/vmispec"
	"kubevirt.io/kubevirt/pkg/testutils"
	kutil "kubevirt.io/kubevirt/pkg/util"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
)

// RefusedError is KubeVirt refusing the VM: its VM admitter's status
// cause (Field, Message), as `kubectl apply` prints it.
type RefusedError struct {
	Field, Message string
}

// Error implements error.
func (e *RefusedError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// VM returns a copy of vm as KubeVirt v1.6.0 starts it: its template is
// the VMI virt-controller creates (before virt-api's VMI mutator), and
// spec.instancetype and spec.preference are gone, applied. objs holds
// what the VM may name; a missing one is a *MissingError, a VM that
// KubeVirt's admitter refuses a *RefusedError.
func VM(vm *v1.VirtualMachine, cfg *virtconfig.ClusterConfig, objs *Objects) (*v1.VirtualMachine, error) {
	vm = vm.DeepCopy()
	if vm.Namespace == "" {
		vm.Namespace = DefaultNamespace
	}
	if vm.Spec.Template == nil {
		return nil, &RefusedError{Field: "spec.template", Message: "must be set: it is the VMI the VirtualMachine runs"}
	}
	if err := objs.Check(vm); err != nil {
		return nil, err
	}
	itFinder := instancetypefind.NewSpecFinder(objs.instancetypes, objs.clusterInstancetypes, nil, nil)
	prefFinder := preferencefind.NewSpecFinder(objs.preferences, objs.clusterPreferences, nil, nil)

	// virt-api's VM mutator (pkg/virt-api/webhooks/mutating-webhook/mutators/vm-mutator.go).
	pref, err := prefFinder.FindPreference(vm)
	if err != nil {
		return nil, fmt.Errorf("finding the preference: %w", err)
	}
	defaults.SetVirtualMachineDefaults(vm, cfg, pref)
	it, err := itFinder.Find(vm)
	if err != nil {
		return nil, fmt.Errorf("finding the instancetype: %w", err)
	}
	if it == nil && pref == nil {
		return vm, nil
	}
	if err := admit(vm, cfg, it, pref); err != nil {
		return nil, err
	}
	if err := start(vm, cfg, it, pref); err != nil {
		return nil, err
	}
	vm.Spec.Instancetype, vm.Spec.Preference = nil, nil
	vm.Status.InstancetypeRef, vm.Status.PreferenceRef = nil, nil
	return vm, nil
}

// admit is virt-api's VM admitter's instancetype part
// (pkg/virt-api/webhooks/validating-webhook/admitters/vms-admitter.go and
// pkg/instancetype/webhooks/vm/admitter.go), on a copy as there.
func admit(vm *v1.VirtualMachine, cfg *virtconfig.ClusterConfig, it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec) error {
	vmCopy := vm.DeepCopy()
	if c := validation.CheckSpreadCPUTopology(it, pref); c != nil {
		return refused(conflict.Conflicts{c})
	}
	if cs := apply.NewVMIApplier().ApplyToVMI(k8sfield.NewPath("spec", "template", "spec"), it, pref,
		&vmCopy.Spec.Template.Spec, &vmCopy.Spec.Template.ObjectMeta); len(cs) > 0 {
		return refused(cs)
	}
	if err := defaults.SetDefaultVirtualMachineInstanceSpec(cfg, &vmCopy.Spec.Template.Spec); err != nil {
		return fmt.Errorf("KubeVirt's VMI spec defaults: %w", err)
	}
	if cs, err := requirements.New().Check(it, pref, &vmCopy.Spec.Template.Spec); err != nil {
		return &RefusedError{Field: cs.String(), Message: fmt.Sprintf("failure checking preference requirements: %v", err)}
	}
	return nil
}

// refused is virt-api's refusal for conflicts: kubectl prints the fields
// and "VM field(s) ... conflicts with selected instance type".
func refused(cs conflict.Conflicts) error {
	return &RefusedError{Field: cs.String(), Message: cs.Error()}
}

// start is what virt-controller does to the VMI it makes from the template
// when it starts the VM (startVMI in pkg/virt-controller/watch/vm/vm.go),
// as far as the instancetype and preference take part: here on the
// template itself, which the launcher then turns into the VMI as
// setupVMIFromVM does. (autoAttachInputDevice, unexported there, adds a
// tablet only when the VM asks for one; the launcher refuses inputs it
// cannot render.)
func start(vm *v1.VirtualMachine, cfg *virtconfig.ClusterConfig, it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec) error {
	spec, meta := &vm.Spec.Template.Spec, &vm.Spec.Template.ObjectMeta
	if vm.Spec.Preference != nil {
		preferenceapply.ApplyDevicePreferences(pref, spec)
	}
	kutil.SetDefaultVolumeDisk(spec)
	if err := vmispec.SetDefaultNetworkInterface(cfg, spec); err != nil {
		return fmt.Errorf("KubeVirt's default network interface: %w", err)
	}
	instancetypeannotations.Set(vm, meta)
	preferenceannotations.Set(vm, meta)
	// The admitter applied the same objects to a copy without conflicts.
	if cs := apply.NewVMIApplier().ApplyToVMI(k8sfield.NewPath("spec"), it, pref, spec, meta); len(cs) > 0 {
		// virt-controller's words (pkg/instancetype/controller/vm).
		return fmt.Errorf("VMI conflicts with instancetype spec in fields: [%s]", cs.String())
	}
	return nil
}

// ClusterConfig is the cluster configuration of a KubeVirt CR with the
// default configuration (no feature gates, the default rollout strategy),
// deployed on this machine's architecture, as KubeVirt's own tests build
// one.
func ClusterConfig() *virtconfig.ClusterConfig {
	cfg, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{})
	return cfg
}
