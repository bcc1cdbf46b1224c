package controller

// The worker: one goroutine per VM, its loop and the order in which it settles.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

// Snapshot is a consistent copy of one VM's state for status queries and
// the live view.
type Snapshot struct {
	// VM is the VirtualMachine with its status, in KubeVirt's JSON shape.
	VM *v1.VirtualMachine `json:"vm"`
	// VMI is the current or last VMI.
	VMI *v1.VirtualMachineInstance `json:"vmi,omitempty"`
	// Attempt is the number of launches so far.
	Attempt int `json:"attempt"`
	// RetryAfter is the exact planned retry time, if any.
	RetryAfter *time.Time `json:"retryAfter,omitempty"`
	// Delay and ScaledDelay are the last planned backoff.
	Delay       time.Duration `json:"delayNs,omitempty"`
	ScaledDelay time.Duration `json:"scaledDelayNs,omitempty"`
	// TimeScale is the controller's --time-scale.
	TimeScale float64 `json:"timeScale"`
	// GaveUp is set when the give-up rule stopped the retries.
	GaveUp bool `json:"gaveUp,omitempty"`
	// LauncherPID is the live launcher's process id, or zero.
	LauncherPID int `json:"launcherPID,omitempty"`
	// LauncherDir is the live or last launcher's folder.
	LauncherDir string `json:"launcherDir,omitempty"`
}

// worker owns one VM: every change to its record happens on the worker's
// goroutine, so no lock guards the record. Others read Snapshots.
type worker struct {
	c   *Controller
	key Key
	log *slog.Logger
	rec *Record
	// launcher is the live launcher of rec.Launcher, through the runtime.
	launcher launchrt.Launcher
	tracker  backoff.Tracker
	rnd      *rand.Rand
	src      *countingSource
	cmds     chan command
	updates  chan launcherUpdate
	snap     atomic.Pointer[Snapshot]

	expect backoff.Expectations
	killAt time.Time // SIGKILL the launcher if it is still there then
	// createRetryAt is when a launcher that could not be started is
	// tried again; createFailures counts those tries for the VMI.
	createRetryAt  time.Time
	createFailures int
	stopping       bool // shutting down with the controller
	timer          clock.Timer
	timerAt        time.Time
	watchCtx       context.Context
	pending        []Event
	replies        []pendingReply
	saved          []byte
	lastDir        string
}

func newWorker(c *Controller, rec *Record) *worker {
	k := KeyOf(rec.VM)
	rnd, src := vmRand(c.cfg.Seed, k, rec.RandDraws)
	w := &worker{
		c: c, key: k, rec: rec, rnd: rnd, src: src,
		log:     c.log.With("vm", k.String()),
		cmds:    make(chan command, 4),
		updates: make(chan launcherUpdate, 16),
	}
	w.tracker = backoff.Tracker{Policy: c.cfg.Policy, Clock: c.clock, Rand: rnd}
	if rec.Launcher != nil {
		w.lastDir = rec.Launcher.Dir
	}
	w.publish()
	return w
}

// run is the worker's loop: wait for something to happen, then settle.
func (w *worker) run(ctx context.Context) {
	watchCtx, cancelWatch := context.WithCancel(context.Background())
	defer cancelWatch()
	w.watchCtx = watchCtx
	w.resume()
	w.settle()
	for {
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case cmd := <-w.cmds:
			w.handle(cmd)
		case up := <-w.updates:
			w.apply(up)
		case <-w.timerC():
			w.timer, w.timerAt = nil, time.Time{}
		}
		w.settle()
	}
}

// settle reconciles and then makes the result visible: persisted first,
// then published, reported and answered.
func (w *worker) settle() {
	w.reconcile()
	w.updateStatus()
	w.persist()
	w.publish()
	w.flushEvents()
	w.flushReplies()
}

// resume picks up a launcher that a previous controller left behind.
func (w *worker) resume() {
	ref := w.rec.Launcher
	if ref == nil {
		return
	}
	l, err := w.c.rt.Adopt(w.watchCtx, ref.Ref)
	if err != nil {
		// Not adoptable: as a launcher that ended while the controller was away.
		w.log.Warn("cannot adopt the launcher of a previous controller run", "pid", ref.PID, "err", err)
		w.note(Event{Event: EventAdopted, PID: ref.PID, VMIUID: string(ref.UID), Message: err.Error()})
		w.apply(launcherUpdate{uid: ref.UID, exited: true, exitCode: -1, exitDesc: "could not be adopted: " + err.Error()})
		return
	}
	w.launcher = l
	alive := true
	select {
	case <-l.Done():
		alive = false
	default:
	}
	w.note(Event{Event: EventAdopted, PID: ref.PID, VMIUID: string(ref.UID),
		Message: fmt.Sprintf("launcher from a previous controller run, alive=%v", alive)})
	go watchLauncher(w.watchCtx, w.c.clock, w.c.cfg.Launcher.poll(), *ref, l, true, w.send)
}

func (w *worker) send(u launcherUpdate) bool {
	select {
	case w.updates <- u:
		return true
	case <-w.watchCtx.Done():
		return false
	}
}

// errNotFound marks an unknown VM name.
var errNotFound = errors.New("no such VM")
