package controller

// Status and persistence: the VM's status fields, the saved record and the published Snapshot.

import (
	"bytes"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

func (w *worker) updateStatus() {
	vm, vmi := w.rec.VM, w.rec.VMI
	live := vmi != nil && !vmi.IsFinal()
	vm.Status.Created = live
	vm.Status.Ready = live && vmi.IsRunning() && isReady(vmi)
	vm.Status.RunStrategy = backoff.StatusRunStrategy(vm, vmi != nil)
	vm.Status.PrintableStatus = backoff.PrintableStatus(vm, vmi, w.expect)
	setGaveUpCondition(vm, w.rec.History.GaveUp, w.c.clock.Now())
}

func (w *worker) persist() {
	w.rec.RandDraws = w.src.draws
	w.rec.TimeScale = w.c.timeScale()
	data, err := w.c.store.Encode(w.rec)
	if err == nil && bytes.Equal(data, w.saved) {
		return
	}
	if err == nil {
		err = w.c.store.Write(w.key, data)
	}
	if err != nil {
		w.log.Error("persisting VM state", "err", err)
		w.note(Event{Event: EventError, Message: err.Error()})
		return
	}
	w.saved = data
}

func (w *worker) publish() {
	s := &Snapshot{
		VM: w.rec.VM.DeepCopy(), VMI: w.rec.VMI.DeepCopy(), Attempt: w.rec.Attempt,
		Delay: w.rec.Delay, ScaledDelay: w.rec.ScaledDelay, TimeScale: w.c.timeScale(),
		GaveUp: w.rec.History.GaveUp, LauncherDir: w.lastDir,
	}
	if sf := w.rec.VM.Status.StartFailure; sf != nil && sf.RetryAfterTimestamp != nil {
		t := sf.RetryAfterTimestamp.Time
		s.RetryAfter = &t
	}
	if w.rec.Launcher != nil {
		s.LauncherPID = w.rec.Launcher.PID
	}
	w.snap.Store(s)
}
