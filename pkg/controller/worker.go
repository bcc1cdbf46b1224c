package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
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

// worker owns one VM: every change to its record happens on the worker's
// goroutine, so no lock guards the record. Others read Snapshots.
type worker struct {
	c       *Controller
	key     Key
	log     *slog.Logger
	rec     *Record
	tracker backoff.Tracker
	rnd     *rand.Rand
	src     *countingSource
	cmds    chan command
	updates chan launcherUpdate
	snap    atomic.Pointer[Snapshot]

	expect   backoff.Expectations
	killAt   time.Time // SIGKILL the launcher if it is still there then
	stopping bool      // shutting down with the controller
	timer    clock.Timer
	timerAt  time.Time
	watchCtx context.Context
	pending  []Event
	replies  []pendingReply
	saved    []byte
	lastDir  string
}

type pendingReply struct {
	ch  chan commandResult
	msg string
	err error
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
	alive := ref.Alive()
	w.note(Event{Event: EventAdopted, PID: ref.PID, VMIUID: string(ref.UID),
		Message: fmt.Sprintf("launcher from a previous controller run, alive=%v", alive)})
	go watchLauncher(w.watchCtx, w.c.clock, w.c.cfg.Launcher.poll(), *ref, nil, w.send)
}

func (w *worker) send(u launcherUpdate) bool {
	select {
	case w.updates <- u:
		return true
	case <-w.watchCtx.Done():
		return false
	}
}

func (w *worker) reconcile() {
	for range 3 {
		if !w.reconcileOnce() {
			return
		}
	}
}

// reconcileOnce applies the backoff rules and the run strategy once. It
// returns true when it changed something that needs another pass (a start
// that failed at once).
func (w *worker) reconcileOnce() bool {
	now := w.c.clock.Now()
	vm, vmi := w.rec.VM, w.rec.VMI
	w.noteChange(w.tracker.Sync(vm, vmi, &w.rec.History))
	strategy, _ := vm.RunStrategy()
	live := vmi != nil && !vmi.IsFinal()

	if live || w.rec.Launcher != nil {
		var wake time.Time
		if live && w.stopWanted(strategy, vmi) {
			w.stopVMI(now)
		}
		if w.rec.Launcher != nil && !live && w.killAt.IsZero() {
			// Final phase reported but the process lingers: give it the
			// same time a stop would get.
			w.killAt = now.Add(w.killAfter())
		}
		if !w.killAt.IsZero() {
			if !now.Before(w.killAt) {
				w.kill()
			} else {
				wake = w.killAt
			}
		}
		if at, ok := w.tracker.ResetCheckAt(vm, vmi); ok {
			wake = earliest(wake, at)
		}
		w.arm(wake, now)
		return false
	}
	w.expect.StopPending = false
	w.trimStopRequests()
	if !w.startWanted(strategy, vmi) {
		w.arm(time.Time{}, now)
		return false
	}
	if w.hasStartRequest() {
		return w.start(now, time.Time{})
	}
	at, ok := backoff.NextStart(vm, &w.rec.History)
	if !ok {
		w.arm(time.Time{}, now)
		return false
	}
	if at.After(now) {
		w.arm(at, now)
		return false
	}
	return w.start(now, at)
}

func (w *worker) stopWanted(strategy v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) bool {
	if strategy == v1.RunStrategyHalted || w.stopping {
		return true
	}
	for _, r := range w.rec.VM.Status.StateChangeRequests {
		if r.Action == v1.StopRequest && r.UID != nil && *r.UID == vmi.UID {
			return true
		}
	}
	return false
}

func (w *worker) startWanted(strategy v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) bool {
	if w.stopping {
		return false
	}
	switch strategy {
	case v1.RunStrategyAlways:
		return true
	case v1.RunStrategyRerunOnFailure:
		return vmi == nil || vmi.Status.Phase == v1.Failed || w.hasStartRequest()
	case v1.RunStrategyOnce:
		return vmi == nil || w.hasStartRequest()
	case v1.RunStrategyManual:
		return w.hasStartRequest()
	}
	// Halted: a start request has no meaning here (start turns Halted
	// into Always), so drop any.
	w.rec.VM.Status.StateChangeRequests = nil
	return false
}

func (w *worker) hasStartRequest() bool {
	for _, r := range w.rec.VM.Status.StateChangeRequests {
		if r.Action == v1.StartRequest {
			return true
		}
	}
	return false
}

// trimStopRequests drops stop requests for VMIs that are no longer live.
func (w *worker) trimStopRequests() {
	var keep []v1.VirtualMachineStateChangeRequest
	for _, r := range w.rec.VM.Status.StateChangeRequests {
		if r.Action != v1.StopRequest {
			keep = append(keep, r)
		}
	}
	w.rec.VM.Status.StateChangeRequests = keep
}

func (w *worker) popStartRequest() {
	reqs := w.rec.VM.Status.StateChangeRequests
	for i, r := range reqs {
		if r.Action == v1.StartRequest {
			w.rec.VM.Status.StateChangeRequests = append(reqs[:i:i], reqs[i+1:]...)
			return
		}
	}
}

// start creates a new VMI and its launcher. planned is the retry time
// the start waited for (zero when it did not wait).
func (w *worker) start(now, planned time.Time) bool {
	cfg := w.c.cfg
	attempt := w.rec.Attempt + 1
	uid := types.UID(uuid.NewString())
	vmi := newVMI(w.rec.VM, uid, now)
	w.popStartRequest()
	w.rec.Attempt, w.rec.VMI = attempt, vmi
	req := launchRequest{
		VMI: vmi, Dir: w.c.store.LauncherDir(w.key, attempt, string(uid)), Attempt: attempt,
		Seed: launcherSeed(cfg.Seed, w.key, attempt), QEMUTimeout: w.qemuTimeout(),
		GracePeriod: w.gracePeriod(), Now: now,
	}
	w.lastDir = string(req.Dir)
	ev := Event{Event: EventStarted, Attempt: attempt, VMIUID: string(uid), QEMUTimeout: req.QEMUTimeout.String()}
	if !planned.IsZero() {
		late := now.Sub(planned).Nanoseconds()
		ev.PlannedAt, ev.LatenessNs = &planned, &late
	}
	ref, proc, err := startLauncher(cfg.Launcher, req)
	if err != nil {
		setPhase(vmi, v1.Failed, now)
		vmi.Status.Reason = "LauncherStartFailed"
		setReady(vmi, false, "LauncherStartFailed", err.Error(), now)
		ev.Event, ev.Reason, ev.Message = EventExited, "LauncherStartFailed", err.Error()
		w.note(ev)
		w.log.Error("starting launcher", "err", err)
		return true
	}
	w.rec.Launcher = ref
	ev.PID = ref.PID
	w.note(ev)
	go watchLauncher(w.watchCtx, w.c.clock, cfg.Launcher.poll(), *ref, proc, w.send)
	return false
}

// qemuTimeout draws KubeVirt's jittered start timeout from the VM's random
// source (base plus a whole number of seconds in [0, jitter)), then
// scales it.
func (w *worker) qemuTimeout() time.Duration {
	return w.c.cfg.Policy.Scaled(w.c.cfg.StartTimeout.Draw(w.rnd))
}

func (w *worker) gracePeriod() time.Duration {
	g := time.Duration(v1.DefaultGracePeriodSeconds) * time.Second
	if t := w.rec.VM.Spec.Template; t != nil && t.Spec.TerminationGracePeriodSeconds != nil {
		g = time.Duration(*t.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return w.c.cfg.Policy.Scaled(g)
}

// killAfter is how long a launcher gets after SIGTERM before SIGKILL:
// its grace period plus time to clean up.
func (w *worker) killAfter() time.Duration { return w.gracePeriod() + w.c.cfg.KillMargin }

func (w *worker) stopVMI(now time.Time) {
	if w.expect.StopPending {
		return
	}
	w.expect.StopPending = true
	w.killAt = now.Add(w.killAfter())
	if ref := w.rec.Launcher; ref != nil {
		if err := ref.Signal(syscall.SIGTERM); err != nil {
			w.log.Info("stopping VMI", "err", err)
		}
	}
}

func (w *worker) kill() {
	w.killAt = time.Time{}
	if ref := w.rec.Launcher; ref != nil {
		w.log.Warn("launcher did not exit in time, sending SIGKILL", "pid", ref.PID)
		if err := ref.Signal(syscall.SIGKILL); err != nil {
			w.log.Info("killing launcher", "err", err)
		}
	}
}

// apply records what a launcher reported.
func (w *worker) apply(up launcherUpdate) {
	vmi := w.rec.VMI
	if vmi == nil || up.uid != vmi.UID {
		if up.exited && w.rec.Launcher != nil && w.rec.Launcher.UID == up.uid {
			w.rec.Launcher = nil
		}
		return
	}
	now := w.c.clock.Now()
	for _, ev := range up.events {
		if ev.UID != "" && ev.UID != string(vmi.UID) {
			w.log.Warn("launcher event for another VMI ignored", "uid", ev.UID)
			continue
		}
		w.applyEvent(vmi, ev, now)
	}
	if !up.exited {
		return
	}
	w.rec.Launcher = nil
	w.killAt = time.Time{}
	w.expect.StopPending = false
	if !vmi.IsFinal() {
		msg := fmt.Sprintf("virt-launcher %s before reporting a final phase", up.exitDesc)
		if l := lastLogLine(launcherapi.Dir(w.lastDir)); l != "" {
			msg += ": ..." + l
		}
		setPhase(vmi, v1.Failed, now)
		vmi.Status.Reason = "LauncherCrashed"
		setReady(vmi, false, "LauncherCrashed", msg, now)
	}
	ev := Event{Event: EventExited, Attempt: w.rec.Attempt, VMIUID: string(vmi.UID), Reason: vmi.Status.Reason, Message: up.exitDesc}
	if up.exitCode >= 0 {
		code := up.exitCode
		ev.ExitCode = &code
	}
	w.note(ev)
}

func (w *worker) applyEvent(vmi *v1.VirtualMachineInstance, ev launcherapi.Event, now time.Time) {
	final := vmi.IsFinal()
	switch ev.Event {
	case launcherapi.EventScheduled:
		if !final {
			setPhase(vmi, v1.Scheduled, now)
		}
	case launcherapi.EventRunning:
		if !final {
			setPhase(vmi, v1.Running, now)
		}
	case launcherapi.EventGuestReady:
		if !final {
			setReady(vmi, true, "GuestReady", ev.Message, now)
		}
	case launcherapi.EventSucceeded, launcherapi.EventFailed:
		if !final {
			setPhase(vmi, v1.VirtualMachineInstancePhase(ev.Event), now)
			vmi.Status.Reason = ev.Reason
			setReady(vmi, false, ev.Reason, ev.Message, now)
		}
	}
	w.note(Event{Event: EventKind(ev.Event), Attempt: w.rec.Attempt, VMIUID: string(vmi.UID), Reason: ev.Reason, Message: ev.Message, ExitCode: ev.ExitCode})
}

func (w *worker) noteChange(ch backoff.Change) {
	switch {
	case ch.Counted:
		w.rec.Delay, w.rec.ScaledDelay = ch.Delay, ch.ScaledDelay
		ev := Event{Event: EventBackoffPlanned, Reason: ch.Reason, Delay: ch.Delay.String(),
			ScaledDelay: ch.ScaledDelay.String(), ScaledDelayNs: ch.ScaledDelay.Nanoseconds()}
		if ch.GaveUp {
			ev.Event = EventGaveUp
			ev.Delay, ev.ScaledDelay, ev.ScaledDelayNs = "", "", 0
		}
		w.note(ev)
	case ch.Cleared:
		w.rec.Delay, w.rec.ScaledDelay = 0, 0
		w.note(Event{Event: EventRecordCleared, Reason: ch.Reason})
	}
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

// applyManifest takes a changed manifest's spec, keeping the status: an
// edited template does not clear the start-failure record, and the next
// VMI is made from the new template.
func (w *worker) applyManifest(m *Manifest) string {
	if m.Digest == w.rec.ManifestDigest {
		return "unchanged"
	}
	old := w.rec.VM
	vm := m.VM.DeepCopy()
	vm.Status = old.Status
	vm.UID, vm.CreationTimestamp, vm.Generation = old.UID, old.CreationTimestamp, old.Generation+1
	w.rec.VM, w.rec.ManifestDigest = vm, m.Digest
	msg := fmt.Sprintf("spec reloaded from %s (generation %d)", m.Source(), vm.Generation)
	w.note(Event{Event: EventManifestChanged, Message: msg})
	return msg
}

func (w *worker) updateStatus() {
	vm, vmi := w.rec.VM, w.rec.VMI
	live := vmi != nil && !vmi.IsFinal()
	strategy, _ := vm.RunStrategy()
	vm.Status.Created = live
	vm.Status.Ready = live && vmi.IsRunning() && isReady(vmi)
	vm.Status.RunStrategy = strategy
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

func (w *worker) note(ev Event) { w.pending = append(w.pending, ev) }

func (w *worker) flushEvents() {
	if len(w.pending) == 0 {
		return
	}
	now := w.c.clock.Now()
	vm := w.rec.VM
	for _, ev := range w.pending {
		ev.Time = now
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
	w.timer = w.c.clock.NewTimer(max(at.Sub(now), 0))
}

// shutdown ends the worker with the controller. With StopOnExit a live
// launcher is stopped gracefully and its VMI dropped, so that the next run
// starts the VM afresh without counting the shutdown as a failure;
// otherwise the launcher is left running and adopted by the next run.
func (w *worker) shutdown() {
	defer func() {
		w.persist()
		w.flushEvents()
	}()
	if !w.c.cfg.StopOnExit || w.rec.Launcher == nil {
		return
	}
	w.stopping = true
	now := w.c.clock.Now()
	if vmi := w.live(); vmi != nil {
		w.stopVMI(now)
	} else {
		w.killAt = now.Add(w.killAfter())
	}
	deadline := w.c.clock.NewTimer(w.killAfter() + w.c.cfg.KillMargin)
	defer deadline.Stop()
	for w.rec.Launcher != nil {
		select {
		case up := <-w.updates:
			w.apply(up)
		case <-w.timerC():
			w.timer, w.timerAt = nil, time.Time{}
			w.kill()
		case <-deadline.C():
			w.log.Error("launcher still running at shutdown", "pid", w.rec.Launcher.PID)
			return
		}
		if !w.killAt.IsZero() && w.timer == nil {
			w.arm(w.killAt, w.c.clock.Now())
		}
	}
	w.note(Event{Event: EventStoppedForShutdown, Message: "VMI stopped because the controller is shutting down"})
	w.rec.VMI = nil
	w.expect = backoff.Expectations{}
	w.updateStatus()
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// errNotFound marks an unknown VM name.
var errNotFound = errors.New("no such VM")
