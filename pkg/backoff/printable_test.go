package backoff

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

func TestPrintableStatus(t *testing.T) {
	const (
		stopped   = v1.VirtualMachineStatusStopped
		starting  = v1.VirtualMachineStatusStarting
		running   = v1.VirtualMachineStatusRunning
		stopping  = v1.VirtualMachineStatusStopping
		crashLoop = v1.VirtualMachineStatusCrashLoopBackOff
		unknown   = v1.VirtualMachineStatusUnknown
	)
	startPending := Expectations{StartPending: true}
	stopPending := Expectations{StopPending: true}
	looping := func(s v1.VirtualMachineRunStrategy) *v1.VirtualMachine { return withRecord(newVM(s), 3, "a") }
	failedVMI := newVMI("a", phaseAt{v1.Failed, 0})
	deleting := newVMI("b", phaseAt{v1.Running, 0})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0()}
	cases := []struct {
		name string
		vm   *v1.VirtualMachine
		vmi  *v1.VirtualMachineInstance
		exp  Expectations
		want v1.VirtualMachinePrintableStatus
	}{
		{"Halted, no VMI", newVM(v1.RunStrategyHalted), nil, Expectations{}, stopped},
		{"Always, start pending", newVM(v1.RunStrategyAlways), nil, startPending, starting},
		{"VMI Pending", newVM(v1.RunStrategyAlways), newVMI("b", phaseAt{v1.Pending, 0}), Expectations{}, starting},
		{"VMI Scheduled", newVM(v1.RunStrategyAlways), newVMI("b", phaseAt{v1.Scheduled, 0}), Expectations{}, starting},
		{"VMI Running", newVM(v1.RunStrategyAlways), newVMI("b", phaseAt{v1.Running, 0}), Expectations{}, running},
		{"Running VMI with stop pending", newVM(v1.RunStrategyAlways), newVMI("b", phaseAt{v1.Running, 0}), stopPending, stopping},
		{"Running VMI marked for deletion", newVM(v1.RunStrategyAlways), deleting, Expectations{}, stopping},
		{"Always, count>0, no VMI", looping(v1.RunStrategyAlways), nil, Expectations{}, crashLoop},
		{"Always, count>0, final VMI", looping(v1.RunStrategyAlways), failedVMI, Expectations{}, crashLoop},
		{"RerunOnFailure, count>0", looping(v1.RunStrategyRerunOnFailure), nil, Expectations{}, crashLoop},
		{"Once, count>0, final VMI", looping(v1.RunStrategyOnce), failedVMI, Expectations{}, crashLoop},
		{"Manual, count>0 (stale record)", looping(v1.RunStrategyManual), nil, Expectations{}, stopped},
		{"Halted, count>0 (stale record)", looping(v1.RunStrategyHalted), nil, Expectations{}, stopped},
		{"count>0 but start pending", looping(v1.RunStrategyAlways), nil, startPending, starting},
		{"count>0 and a live VMI scheduling", looping(v1.RunStrategyAlways), newVMI("c", phaseAt{v1.Scheduled, 0}), Expectations{}, starting},
		{"Always, count 0, final VMI", newVM(v1.RunStrategyAlways), failedVMI, Expectations{}, stopped},
		{"stop pending but VMI already final", looping(v1.RunStrategyAlways), failedVMI, stopPending, crashLoop},
		{"VMI in phase Unknown", newVM(v1.RunStrategyAlways), newVMI("b", phaseAt{v1.Unknown, 0}), Expectations{}, unknown},
	}
	for _, c := range cases {
		if got := PrintableStatus(c.vm, c.vmi, c.exp); got != c.want {
			t.Errorf("%s: PrintableStatus = %s, want %s", c.name, got, c.want)
		}
	}
}
