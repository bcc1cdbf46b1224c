package controller

// Start: a new VMI and its launcher, with the drawn start timeout and the grace period.

import (
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
)

// Launcher creation retry: a launcher that cannot be started is retried
// for the same Pending VMI after createRetryBase, doubling up to
// createRetryMax (both scaled). Upstream's VMI controller retries pod
// creation through its rate-limited work queue; the exact cadence is not
// part of the crash-loop rules.
const (
	createRetryBase = time.Second
	createRetryMax  = time.Minute
)

// start creates a new VMI and its launcher. planned is the retry time
// the start waited for (zero when it did not wait).
func (w *worker) start(now, planned time.Time) bool {
	uid := types.UID(uuid.NewString())
	vmi := newVMI(w.rec.VM, w.rec.template(), uid, now)
	w.rec.VMI = vmi
	w.createFailures = 0
	return w.createLauncher(vmi, now, planned)
}

// createLauncher starts the launcher of vmi, a new attempt. On success the
// VMI goes Scheduling (upstream: its pod exists); when the launcher cannot
// be started the VMI stays Pending with upstream's FailedCreate condition
// and the launcher is retried later: that is not a start failure.
func (w *worker) createLauncher(vmi *v1.VirtualMachineInstance, now, planned time.Time) bool {
	cfg := w.c.cfg
	attempt := w.rec.Attempt + 1
	w.rec.Attempt = attempt
	req := launchRequest{
		VMI: vmi, Dir: w.c.store.LauncherDir(w.key, attempt, string(vmi.UID)), Attempt: attempt,
		Seed: launcherSeed(cfg.Seed, w.key, attempt), QEMUTimeout: w.qemuTimeout(),
		GracePeriod: w.gracePeriod(), Now: now,
	}
	w.lastDir = string(req.Dir)
	ev := Event{Time: now, Event: EventStarted, Attempt: attempt, VMIUID: string(vmi.UID), QEMUTimeout: req.QEMUTimeout.String()}
	if !planned.IsZero() {
		late := now.Sub(planned).Nanoseconds()
		ev.PlannedAt, ev.LatenessNs = &planned, &late
	}
	ref, l, err := startLauncher(w.watchCtx, w.c.rt, cfg.Launcher, req)
	if err != nil {
		setCondition(vmi, backoff.FailedCreateCondition(err, now))
		w.createFailures++
		wait := createRetryBase << min(w.createFailures-1, 6)
		w.createRetryAt = now.Add(w.c.cfg.Policy.Scaled(min(wait, createRetryMax)))
		ev.Event, ev.Reason, ev.Message = EventFailedCreate, backoff.ReasonFailedCreate, err.Error()
		w.note(ev)
		w.log.Error("starting launcher", "err", err)
		return true
	}
	removeCondition(vmi, v1.VirtualMachineInstanceSynchronized)
	setPhase(vmi, v1.Scheduling, now)
	w.rec.Launcher, w.launcher = ref, l
	ev.PID = ref.PID
	w.note(ev)
	go watchLauncher(w.watchCtx, w.c.clock, cfg.Launcher.poll(), *ref, l, false, w.send)
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
	if t := w.rec.template(); t != nil && t.Spec.TerminationGracePeriodSeconds != nil {
		g = time.Duration(*t.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return w.c.cfg.Policy.Scaled(g)
}
