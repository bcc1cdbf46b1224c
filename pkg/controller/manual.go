package controller

// Manual operations: virtctl's stop, start and restart, answered by
// virt-api's rules (pkg/vmops), and the command plumbing that carries them.

import (
	"fmt"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/vmops"
)

// command is a request to a worker from the control socket or the
// manifest watcher.
type command struct {
	op       string
	manifest *Manifest
	reply    chan commandResult
}

type commandResult struct {
	snap *Snapshot
	msg  string
	err  error
}

// Operations a worker accepts.
const (
	opStop    = string(vmops.OpStop)
	opStart   = string(vmops.OpStart)
	opRestart = string(vmops.OpRestart)
	opApply   = "apply"
)

type pendingReply struct {
	ch  chan commandResult
	msg string
	err error
}

// handle runs a command; its answer goes out after the next settle, so the
// caller sees the state the command led to.
func (w *worker) handle(cmd command) {
	var msg string
	var err error
	switch cmd.op {
	case opApply:
		msg = w.applyManifest(cmd.manifest)
	case opStop, opStart, opRestart:
		msg, err = w.manual(vmops.Op(cmd.op))
	default:
		err = fmt.Errorf("unknown operation %q", cmd.op)
	}
	if cmd.reply != nil {
		w.replies = append(w.replies, pendingReply{ch: cmd.reply, msg: msg, err: err})
	}
}

func (w *worker) live() *v1.VirtualMachineInstance {
	if vmi := w.rec.VMI; vmi != nil && !vmi.IsFinal() {
		return vmi
	}
	return nil
}

func (w *worker) setStrategy(s v1.VirtualMachineRunStrategy) {
	vm := w.rec.VM
	vm.Spec.Running = nil
	vm.Spec.RunStrategy = &s
	vm.Generation++
}

func (w *worker) request(action v1.StateChangeRequestAction, uid *types.UID) {
	w.rec.VM.Status.StateChangeRequests = append(w.rec.VM.Status.StateChangeRequests,
		v1.VirtualMachineStateChangeRequest{Action: action, UID: uid})
}

// manual answers virtctl stop, start or restart as virt-api does
// (vmops.Ours: upstream's rules, except that a RerunOnFailure VM can be
// stopped during its backoff). A refusal is upstream's error with its
// message and changes nothing; an accepted operation applies upstream's
// patch (run strategy, state-change requests, removal of startFailure),
// and the reconcile that follows carries it out: an Always or Once stop
// turns the VM Halted, which clears the record.
func (w *worker) manual(op vmops.Op) (string, error) {
	vm, vmi := w.rec.VM, w.rec.VMI
	o, err := vmops.Ours().Do(op, vm, vmi)
	if err != nil {
		return "", err
	}
	if !o.Accepted() {
		// The grace period of a live VMI is patched also when the stop
		// is refused, as upstream does.
		o.Patch.Apply(vm, vmi)
		return "", o.Err(w.key.Name)
	}
	o.Patch.Apply(vm, vmi)
	if o.Patch.RemoveStartFailure {
		backoff.ClearRecord(vm, &w.rec.History)
	}
	if o.Patch.DeleteLauncherPod && w.rec.Launcher != nil {
		if err := w.signal(syscall.SIGKILL); err != nil {
			w.log.Info("deleting launcher", "err", err)
		}
	}
	kind := map[vmops.Op]EventKind{vmops.OpStop: EventStopRequested, vmops.OpStart: EventStartRequested, vmops.OpRestart: EventRestartRequested}[op]
	msg := fmt.Sprintf("VM %s: %s accepted (%d)", w.key, op, o.Code)
	if o.Deviation != "" {
		msg += fmt.Sprintf("; deviation %s from KubeVirt v1.6.0", o.Deviation)
	}
	w.note(Event{Event: kind, Message: msg})
	return msg, nil
}
