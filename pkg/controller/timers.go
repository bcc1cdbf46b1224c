package controller

// Timers: the worker's single timer.

import (
	"time"
)

func (w *worker) timerC() <-chan time.Time {
	if w.timer == nil {
		return nil
	}
	return w.timer.C()
}

// arm sets the worker's single timer to fire at at (zero: no timer).
func (w *worker) arm(at, now time.Time) {
	if at.Equal(w.timerAt) && (w.timer != nil || at.IsZero()) {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.timerAt = at
	if at.IsZero() {
		return
	}
	// From the clock's time now, not from now: a timer counts from its
	// creation, and the reconcile that computed at may have taken a while.
	w.timer = w.c.clock.NewTimer(max(at.Sub(w.c.clock.Now()), 0))
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
