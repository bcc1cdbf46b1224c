package vmexpand

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const testVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm1}
spec:
  instancetype: {kind: VirtualMachineInstancetype, name: small}
  preference: {name: pc}
  template:
    spec:
      domain: {devices: {disks: [{name: root, disk: {}}]}}
      volumes: [{name: root, containerDisk: {image: img}}]
`

func objects(t *testing.T, docs ...string) *Objects {
	t.Helper()
	var list []metav1.Object
	for _, d := range docs {
		o, err := DecodeObject([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, o)
	}
	o, err := NewObjects(list...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func vm(t *testing.T, doc string) *v1.VirtualMachine {
	t.Helper()
	vm := &v1.VirtualMachine{}
	if err := yaml.Unmarshal([]byte(doc), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

const (
	small = `{"apiVersion":"instancetype.kubevirt.io/v1beta1","kind":"VirtualMachineInstancetype","metadata":{"name":"small"},"spec":{"cpu":{"guest":2},"memory":{"guest":"384Mi"}}}`
	pc    = `{"apiVersion":"instancetype.kubevirt.io/v1beta1","kind":"VirtualMachineClusterPreference","metadata":{"name":"pc"},"spec":{"machine":{"preferredMachineType":"pc-q35-7.2"},"cpu":{"preferredCPUTopology":"cores"},"devices":{"preferredDiskBus":"virtio"}}}`
)

// TestVM: the instancetype's CPU and memory and the preference's topology,
// disk bus and machine type (which virt-api's VM mutator takes from the
// preference, before the admitter) end up in the template, and the
// references are gone.
func TestVM(t *testing.T) {
	got, err := VM(vm(t, testVM), ClusterConfig(), objects(t, small, pc))
	if err != nil {
		t.Fatal(err)
	}
	d := got.Spec.Template.Spec.Domain
	if d.CPU == nil || d.CPU.Cores != 2 || d.CPU.Sockets != 1 || d.Memory == nil || d.Memory.Guest.String() != "384Mi" {
		t.Errorf("CPU %+v, memory %+v: want 2 cores, 384Mi", d.CPU, d.Memory)
	}
	if d.Machine == nil || d.Machine.Type != "pc-q35-7.2" {
		t.Errorf("machine %+v, want the preference's pc-q35-7.2", d.Machine)
	}
	if bus := d.Devices.Disks[0].Disk.Bus; bus != v1.DiskBusVirtio {
		t.Errorf("disk bus %q, want the preference's virtio", bus)
	}
	if got.Spec.Instancetype != nil || got.Spec.Preference != nil {
		t.Errorf("references left: %+v %+v", got.Spec.Instancetype, got.Spec.Preference)
	}
	if a := got.Spec.Template.ObjectMeta.Annotations; a[v1.InstancetypeAnnotation] != "small" || a[v1.ClusterPreferenceAnnotation] != "pc" {
		t.Errorf("annotations %v", a)
	}
}

// TestVMRefusals: a conflict is virt-api's refusal; a missing object names
// its kind and name.
func TestVMRefusals(t *testing.T) {
	withMemory := vm(t, testVM)
	q := withMemory.Spec.Template.Spec.Domain
	q.Memory = &v1.Memory{}
	withMemory.Spec.Template.Spec.Domain = q
	_, err := VM(withMemory, ClusterConfig(), objects(t, small, pc))
	var refused *RefusedError
	if !errors.As(err, &refused) || err.Error() != "spec.template.spec.domain.memory: VM field(s) spec.template.spec.domain.memory conflicts with selected instance type" {
		t.Errorf("conflict: %v", err)
	}
	_, err = VM(vm(t, testVM), ClusterConfig(), objects(t, small))
	var missing *MissingError
	if !errors.As(err, &missing) || err.Error() != `field spec.preference: VirtualMachineClusterPreference "pc" not found` {
		t.Errorf("missing: %v", err)
	}
}
