package backoff

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

// t0 is the fake clock's start; every test time is an offset from it.
func t0() time.Time { return time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC) }

func newVM(strategy v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default"}}
	if strategy != "" {
		vm.Spec.RunStrategy = &strategy
	}
	vm.Spec.Template = &v1.VirtualMachineInstanceTemplateSpec{}
	return vm
}

func withRecord(vm *v1.VirtualMachine, count int, uid types.UID) *v1.VirtualMachine {
	rt := metav1.NewTime(t0().Add(-time.Second))
	vm.Status.StartFailure = &v1.VirtualMachineStartFailure{ConsecutiveFailCount: count, LastFailedVMIUID: uid, RetryAfterTimestamp: &rt}
	return vm
}

// phaseAt is one phase transition, at an offset from t0.
type phaseAt struct {
	phase v1.VirtualMachineInstancePhase
	at    time.Duration
}

// newVMI builds a VMI that went through the given phases; its current
// phase is the last one.
func newVMI(uid types.UID, phases ...phaseAt) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default", UID: uid}}
	for _, p := range phases {
		vmi.Status.Phase = p.phase
		vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps, v1.VirtualMachineInstancePhaseTransitionTimestamp{
			Phase: p.phase, PhaseTransitionTimestamp: metav1.NewTime(t0().Add(p.at)),
		})
	}
	return vmi
}

func ptr[T any](v T) *T { return &v }
