package launchrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// Process is the runtime of bare processes: the launcher started through
// pkg/spawn in its own process group, with the caller's rlimits and no
// cgroup limits of its own.
type Process struct {
	// Spawner, when set, starts the launchers so that they die with it
	// (the node agent's pods die with their node); otherwise they outlive
	// the caller (spawn.Start: a pod outlives its controller) and a
	// restarted caller adopts them.
	Spawner *spawn.Spawner
	// Clock paces the checks of adopted launchers; nil means the real one.
	Clock clock.WithTicker
	// Poll is how often an adopted launcher is checked at first; the
	// interval doubles up to 8 times Poll while it lives. Zero means 50 ms.
	Poll time.Duration
	// Logger, if set, hears about limits that are not enforced.
	Logger *slog.Logger
}

// Name is "process".
func (Process) Name() string { return "process" }

// Start starts spec.Path with spec.Args. The pod's limits are not
// enforced: Logger hears it.
func (r Process) Start(_ context.Context, spec Spec) (Launcher, error) {
	if res := spec.Pod.Resources; (res.MemoryLimit > 0 || res.CPULimitMilli > 0) && r.Logger != nil {
		r.Logger.Warn("the process runtime does not enforce the compute container's limits", "pod", spec.Pod.Namespace+"/"+spec.Pod.Name,
			"memoryLimit", res.MemoryLimit, "cpuLimitMilli", res.CPULimitMilli)
	}
	ss := spawn.Spec{Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir, Stdout: spec.Stdout, Stderr: spec.Stderr,
		StdoutFile: spec.StdoutFile, StderrFile: spec.StderrFile, Truncate: spec.Truncate}
	if spec.Nice > 0 {
		if nice, err := exec.LookPath("nice"); err == nil {
			ss.Path, ss.Args = nice, append([]string{"-n", strconv.Itoa(spec.Nice), "--", spec.Path}, spec.Args...)
		}
	}
	var p *spawn.Process
	var err error
	if r.Spawner != nil {
		p, err = r.Spawner.Start(ss)
	} else {
		p, err = spawn.Start(ss)
	}
	if err != nil {
		return nil, err
	}
	// The start time comes from spawn, read before the child could be
	// reaped: RefOf here would find nothing of a launcher that already
	// ended.
	return &child{p: p, ref: Ref{PID: p.PID(), StartTicks: p.StartTicks()}}, nil
}

// child is a launcher this process started.
type child struct {
	p   *spawn.Process
	ref Ref
}

func (c *child) ID() string                      { return "pid " + strconv.Itoa(c.ref.PID) }
func (c *child) Ref() Ref                        { return c.ref }
func (c *child) Signal(sig syscall.Signal) error { return c.p.Signal(sig) }
func (c *child) Done() <-chan struct{}           { return c.p.Done() }

func (c *child) Exit() Exit {
	if !c.p.Exited() {
		return Exit{}
	}
	return childExit(c.p.Exit())
}

// childExit is a reaped child's end.
func childExit(e spawn.Exit) Exit {
	if e.Code < 0 {
		return Exit{Code: -1, Reason: ReasonError, Message: e.String()}
	}
	return Exit{Code: e.Code, Signal: e.Signal, Reason: ExitReason(e.Code, 0)}
}

func (c *child) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	st, err := c.p.Stop(ctx, grace)
	return st.Killed, err
}

// Adopt follows the process ref names, if it is still that process, by
// reading /proc; its exit code is unknown.
func (r Process) Adopt(ctx context.Context, ref Ref) (Launcher, error) {
	if ref.PID <= 0 {
		return nil, fmt.Errorf("adopting launcher pid %d: not a process id", ref.PID)
	}
	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	poll := r.Poll
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	a := &adopted{ref: ref, clock: clk, done: make(chan struct{})}
	if !ref.Alive() {
		close(a.done) // gone already: Done says so at once
		return a, nil
	}
	go a.watch(ctx, poll)
	return a, nil
}

// adopted is a launcher started before the caller restarted: not its
// child, so its end is seen in /proc.
type adopted struct {
	ref   Ref
	clock clock.WithTicker
	done  chan struct{}
}

// watch closes done once the process is gone, or returns when ctx ends.
func (a *adopted) watch(ctx context.Context, poll time.Duration) {
	interval := poll
	for {
		t := a.clock.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		interval = min(2*interval, 8*poll)
		if !a.ref.Alive() {
			close(a.done)
			return
		}
	}
}

func (a *adopted) ID() string                      { return "pid " + strconv.Itoa(a.ref.PID) + " (adopted)" }
func (a *adopted) Ref() Ref                        { return a.ref }
func (a *adopted) Signal(sig syscall.Signal) error { return a.ref.Signal(sig) }
func (a *adopted) Done() <-chan struct{}           { return a.done }

func (a *adopted) Exit() Exit {
	select {
	case <-a.done:
		return Exit{Code: -1, Reason: ReasonError, Message: "exited while not watched (exit code unknown)"}
	default:
		return Exit{}
	}
}

// Stop sends SIGTERM, then SIGKILL once grace has passed or ctx ends, and
// waits up to spawn.KillWait after it.
func (a *adopted) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	select {
	case <-a.done:
		return false, nil
	default:
	}
	_ = a.Signal(syscall.SIGTERM)
	t := a.clock.NewTimer(grace)
	defer t.Stop()
	select {
	case <-a.done:
		return false, nil
	case <-t.C():
	case <-ctx.Done():
	}
	_ = a.Signal(syscall.SIGKILL)
	k := a.clock.NewTimer(spawn.KillWait)
	defer k.Stop()
	select {
	case <-a.done:
		return true, nil
	case <-k.C():
		return true, errors.New("launcher " + a.ID() + " still there " + spawn.KillWait.String() + " after SIGKILL")
	}
}
