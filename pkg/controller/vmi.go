package controller

import (
	"strconv"
	"time"

	k8score "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

// GenerationAnnotation records on a VMI the VM generation it was made from,
// as KubeVirt does.
const GenerationAnnotation = v1.VirtualMachineGenerationAnnotation

// newVMI makes a VirtualMachineInstance from the VM's template (tmpl:
// with its instancetype and preference applied), the way KubeVirt's VM
// controller does: template metadata and spec, the VM's name and
// namespace, an owner reference to the VM, a fresh UID, phase Pending.
func newVMI(vm *v1.VirtualMachine, tmpl *v1.VirtualMachineInstanceTemplateSpec, uid types.UID, now time.Time) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
	}
	if tmpl != nil {
		vmi.ObjectMeta = *tmpl.ObjectMeta.DeepCopy()
		vmi.Spec = *tmpl.Spec.DeepCopy()
	}
	vmi.Name = vm.Name
	vmi.GenerateName = ""
	vmi.Namespace = vm.Namespace
	vmi.UID = uid
	vmi.CreationTimestamp = metav1.NewTime(now)
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[GenerationAnnotation] = itoa(vm.Generation)
	isController := true
	vmi.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine",
		Name: vm.Name, UID: vm.UID, Controller: &isController,
	}}
	setPhase(vmi, v1.Pending, now)
	return vmi
}

// template is what the record's VMIs are made from: the expanded template
// when the VM names an instancetype or a preference, else its own.
func (r *Record) template() *v1.VirtualMachineInstanceTemplateSpec {
	if r.Template != nil {
		return r.Template
	}
	return r.VM.Spec.Template
}

// setPhase moves the VMI to phase and records the first time it entered it.
func setPhase(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase, now time.Time) {
	vmi.Status.Phase = phase
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == phase {
			return
		}
	}
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
}

// setReady sets the VMI's Ready condition.
func setReady(vmi *v1.VirtualMachineInstance, ready bool, reason, message string, now time.Time) {
	status := k8score.ConditionFalse
	if ready {
		status = k8score.ConditionTrue
	}
	cond := v1.VirtualMachineInstanceCondition{
		Type: v1.VirtualMachineInstanceReady, Status: status, Reason: reason, Message: message,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
	for i, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstanceReady {
			if c.Status == status {
				cond.LastTransitionTime = c.LastTransitionTime
			}
			vmi.Status.Conditions[i] = cond
			return
		}
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, cond)
}

// isReady reports the VMI's Ready condition.
func isReady(vmi *v1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstanceReady {
			return c.Status == k8score.ConditionTrue
		}
	}
	return false
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// GaveUpReason is the reason of the VM's Failure condition once the
// give-up rule stopped the retries.
const GaveUpReason = "CrashLoopGaveUp"

// setGaveUpCondition keeps the VM's Failure condition in step with the
// give-up rule: present while it holds, gone once the record is cleared.
func setGaveUpCondition(vm *v1.VirtualMachine, gaveUp bool, now time.Time) {
	var keep []v1.VirtualMachineCondition
	had := false
	for _, c := range vm.Status.Conditions {
		if c.Type == v1.VirtualMachineFailure && c.Reason == GaveUpReason {
			had = true
			if gaveUp {
				keep = append(keep, c)
			}
			continue
		}
		keep = append(keep, c)
	}
	if gaveUp && !had {
		keep = append(keep, v1.VirtualMachineCondition{
			Type: v1.VirtualMachineFailure, Status: k8score.ConditionTrue, Reason: GaveUpReason,
			Message:            "the give-up rule stopped retrying; start or restart the VM to try again",
			LastTransitionTime: metav1.NewTime(now), LastProbeTime: metav1.NewTime(now),
		})
	}
	vm.Status.Conditions = keep
}

// setCondition sets (replaces) the VMI condition of c's type.
func setCondition(vmi *v1.VirtualMachineInstance, c v1.VirtualMachineInstanceCondition) {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == c.Type {
			vmi.Status.Conditions[i] = c
			return
		}
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, c)
}

// removeCondition drops the VMI condition of type t.
func removeCondition(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType) {
	var keep []v1.VirtualMachineInstanceCondition
	for _, c := range vmi.Status.Conditions {
		if c.Type != t {
			keep = append(keep, c)
		}
	}
	vmi.Status.Conditions = keep
}
