package controller

// Flushing: events to the Observer and answers to waiting commands, after each settle.

// note queues ev for the next flush. Its Time is when the change was made
// (the caller's decision time, or now), not when it is reported: the flush
// comes after the state is persisted, and an fsync must not move the
// times a reader measures the schedule by.
func (w *worker) note(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = w.c.clock.Now()
	}
	w.pending = append(w.pending, ev)
}

func (w *worker) flushEvents() {
	if len(w.pending) == 0 {
		return
	}
	vm := w.rec.VM
	for _, ev := range w.pending {
		ev.VM = w.key.String()
		ev.PrintableStatus = string(vm.Status.PrintableStatus)
		ev.TimeScale, ev.Seed = w.c.timeScale(), w.c.cfg.Seed
		if ev.Attempt == 0 {
			ev.Attempt = w.rec.Attempt
		}
		if ev.Phase == "" && w.rec.VMI != nil {
			ev.Phase = string(w.rec.VMI.Status.Phase)
		}
		if sf := vm.Status.StartFailure; sf != nil {
			ev.FailCount = sf.ConsecutiveFailCount
			if sf.RetryAfterTimestamp != nil {
				t := sf.RetryAfterTimestamp.Time
				ev.RetryAfter = &t
			}
		}
		if w.c.cfg.Observer != nil {
			w.c.cfg.Observer.Observe(ev)
		}
	}
	w.pending = w.pending[:0]
}

func (w *worker) flushReplies() {
	if len(w.replies) == 0 {
		return
	}
	snap := w.snap.Load()
	for _, r := range w.replies {
		r.ch <- commandResult{snap: snap, msg: r.msg, err: r.err}
	}
	w.replies = w.replies[:0]
}
