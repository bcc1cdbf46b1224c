package controller

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
