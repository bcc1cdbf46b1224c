package controller

// Manual operations: virtctl's stop, start and restart, and the command plumbing that carries them.

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
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
	opStop    = "stop"
	opStart   = "start"
	opRestart = "restart"
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
	case opStop:
		msg, err = w.manualStop()
	case opStart:
		msg, err = w.manualStart()
	case opRestart:
		msg, err = w.manualRestart()
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

// manualStop is virtctl stop: the VM's run strategy becomes Halted (Manual
// stays Manual with a stop request), the start-failure record is cleared,
// and a live VMI is shut down. It works in the middle of a crash loop,
// with no live VMI.
func (w *worker) manualStop() (string, error) {
	strategy, _ := w.rec.VM.RunStrategy()
	live := w.live()
	if live == nil && (strategy == v1.RunStrategyHalted || strategy == v1.RunStrategyManual) {
		return "", fmt.Errorf("VM %s is not running (runStrategy %s, no live VMI)", w.key, strategy)
	}
	backoff.ClearRecord(w.rec.VM, &w.rec.History)
	w.forgetFinalVMI()
	if strategy == v1.RunStrategyManual {
		uid := live.UID
		w.request(v1.StopRequest, &uid)
	} else {
		w.setStrategy(v1.RunStrategyHalted)
	}
	msg := fmt.Sprintf("VM %s stopping; start-failure record cleared", w.key)
	if live == nil {
		msg = fmt.Sprintf("VM %s stopped (no live VMI); start-failure record cleared", w.key)
	}
	w.note(Event{Event: EventStopRequested, Message: msg})
	return msg, nil
}

// manualStart is virtctl start: Halted becomes Always, other strategies
// get a start request; the record is cleared so the start is immediate.
func (w *worker) manualStart() (string, error) {
	if live := w.live(); live != nil {
		return "", fmt.Errorf("VM %s is already running (VMI %s, phase %s)", w.key, live.UID, live.Status.Phase)
	}
	strategy, _ := w.rec.VM.RunStrategy()
	backoff.ClearRecord(w.rec.VM, &w.rec.History)
	w.forgetFinalVMI()
	switch strategy {
	case v1.RunStrategyHalted:
		w.setStrategy(v1.RunStrategyAlways)
	case v1.RunStrategyAlways:
	default:
		w.request(v1.StartRequest, nil)
	}
	msg := fmt.Sprintf("VM %s starting; start-failure record cleared", w.key)
	w.note(Event{Event: EventStartRequested, Message: msg})
	return msg, nil
}

// manualRestart is virtctl restart: stop the live VMI, if any, and start a
// new one at once, with the record cleared.
func (w *worker) manualRestart() (string, error) {
	strategy, _ := w.rec.VM.RunStrategy()
	live := w.live()
	if strategy == v1.RunStrategyHalted || (strategy == v1.RunStrategyManual && live == nil) {
		return "", fmt.Errorf("VM %s is not running (runStrategy %s); use start", w.key, strategy)
	}
	backoff.ClearRecord(w.rec.VM, &w.rec.History)
	w.forgetFinalVMI()
	if live != nil {
		uid := live.UID
		w.request(v1.StopRequest, &uid)
	}
	w.request(v1.StartRequest, nil)
	msg := fmt.Sprintf("VM %s restarting; start-failure record cleared", w.key)
	w.note(Event{Event: EventRestartRequested, Message: msg})
	return msg, nil
}

// forgetFinalVMI drops a VMI that already ended, on a manual stop, start or
// restart. KubeVirt deletes the old VMI at that point; keeping it here made
// the tracker, whose record those operations just cleared (and with it the
// last counted VMI's UID), count the same failed VMI a second time: a
// "start" then waited out a backoff instead of starting at once, and the
// new loop began at count 2 instead of 1.
func (w *worker) forgetFinalVMI() {
	if vmi := w.rec.VMI; vmi != nil && vmi.IsFinal() {
		w.rec.VMI = nil
	}
}
