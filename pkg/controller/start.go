package controller

// Start: a new VMI and its launcher, with the drawn start timeout and the grace period.

import (
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

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
