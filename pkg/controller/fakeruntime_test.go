package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

// fakeRuntime is a launchrt.Runtime whose launchers are no processes:
// each speaks the launcher's contract (event lines in its events file, an
// exit code, SIGTERM) on the injected clock, so the controller's tests run
// without processes and without sleeping. A launcher's behaviour comes
// from its VMI's annotation fakeBehavior:
//
//	run                 Scheduled, Running, GuestReady; on SIGTERM Succeeded, exit 0 (default)
//	succeed-after=DUR   Scheduled, Running, GuestReady, then Succeeded after DUR, exit 0
//	fail-start          Scheduled, then Failed (QemuStartTimeout), exit 10
//	fail-attempts=N     crash (exit 2, no events) while --attempt <= N, else run
//
// KubeVirt's fail-fast annotation crashes it at once, as the real one.
// The launchers outlive a controller's Run, as processes do, and the next
// Run adopts them by PID.
type fakeRuntime struct {
	clock *clocktesting.FakeClock
	// startErr, when set, fails every start (a launcher binary that
	// cannot be run).
	startErr error

	mu        sync.Mutex
	nextPID   int
	launchers map[int]*fakeLauncher
}

const fakeBehavior = "fake.crashloop.test/behavior"

// fakePIDs start above the kernel's highest possible PID (PID_MAX_LIMIT,
// 2^22), so no fake is ever mistaken for a real process.
const fakePIDs = 1 << 23

func newFakeRuntime(clk *clocktesting.FakeClock) *fakeRuntime {
	return &fakeRuntime{clock: clk, nextPID: fakePIDs, launchers: map[int]*fakeLauncher{}}
}

func (*fakeRuntime) Name() string { return "fake" }

func (r *fakeRuntime) Start(_ context.Context, spec launchrt.Spec) (launchrt.Launcher, error) {
	if r.startErr != nil {
		return nil, r.startErr
	}
	args, err := launcherapi.ParseArgs(spec.Args, launcherapi.DefaultArgs(), io.Discard)
	if err != nil {
		return nil, fmt.Errorf("fake launcher: %w", err)
	}
	data, err := os.ReadFile(args.Manifest)
	if err != nil {
		return nil, fmt.Errorf("fake launcher: %w", err)
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(data, vmi); err != nil {
		return nil, fmt.Errorf("fake launcher: %w", err)
	}
	r.mu.Lock()
	r.nextPID++
	l := &fakeLauncher{ref: launchrt.Ref{PID: r.nextPID, StartTicks: 1}, dir: launcherapi.Dir(spec.Dir),
		vmi: vmi, attempt: args.Attempt, clock: r.clock, done: make(chan struct{})}
	r.launchers[l.ref.PID] = l
	r.mu.Unlock()
	l.behave(vmi.Annotations)
	return l, nil
}

// Adopt finds a launcher started by an earlier Run; one that is not
// there is as a process that has gone.
func (r *fakeRuntime) Adopt(_ context.Context, ref launchrt.Ref) (launchrt.Launcher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.launchers[ref.PID]; ok {
		return l, nil
	}
	l := &fakeLauncher{ref: ref, done: make(chan struct{}), exit: launchrt.Exit{Code: -1, Reason: launchrt.ReasonError}}
	close(l.done)
	return l, nil
}

// launcher returns the fake launcher with pid.
func (r *fakeRuntime) launcher(pid int) *fakeLauncher {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.launchers[pid]
}

// fakeLauncher is one fake launch.
type fakeLauncher struct {
	ref     launchrt.Ref
	dir     launcherapi.Dir
	vmi     *v1.VirtualMachineInstance
	attempt int
	clock   *clocktesting.FakeClock

	mu      sync.Mutex
	signals []syscall.Signal
	exit    launchrt.Exit
	done    chan struct{}
	ended   bool
}

// behave carries out the start of the behaviour its annotations ask for.
func (l *fakeLauncher) behave(ann map[string]string) {
	behavior := ann[fakeBehavior]
	if _, ok := ann[v1.FuncTestLauncherFailFastAnnotation]; ok {
		behavior = "fail-attempts=1000000"
	}
	if n, ok := strings.CutPrefix(behavior, "fail-attempts="); ok {
		if limit, _ := strconv.Atoi(n); l.attempt <= limit {
			l.write(l.dir.Log(), []byte("panic: fake launcher crash\n"))
			l.end(launchrt.Exit{Code: int(launcherapi.ExitPanic), Reason: launchrt.ReasonError})
			return
		}
		behavior = "run"
	}
	l.emit(launcherapi.EventScheduled, launcherapi.PhaseScheduled, "", nil)
	if behavior == "fail-start" {
		code := int(launcherapi.ExitQemuStartTimeout)
		l.emit(launcherapi.EventFailed, launcherapi.PhaseFailed, launcherapi.ReasonQemuStartTimeout, &code)
		l.end(launchrt.Exit{Code: code, Reason: launchrt.ReasonError})
		return
	}
	l.emit(launcherapi.EventRunning, launcherapi.PhaseRunning, "", nil)
	l.emit(launcherapi.EventGuestReady, launcherapi.PhaseRunning, "", nil)
	if d, ok := strings.CutPrefix(behavior, "succeed-after="); ok {
		dur, _ := time.ParseDuration(d)
		// Not on the clock's own goroutine: it holds the clock's lock.
		l.clock.AfterFunc(dur, func() { go l.succeed(launcherapi.ReasonGuestShutdown) })
	}
}

// emit appends one event line to the events file.
func (l *fakeLauncher) emit(event, phase, reason string, code *int) {
	line, _ := launcherapi.Event{Time: l.clock.Now(), Event: event, VMI: l.vmi.Name, Namespace: l.vmi.Namespace,
		UID: string(l.vmi.UID), Phase: phase, Attempt: l.attempt, Reason: reason, ExitCode: code}.MarshalLine()
	l.write(l.dir.Events(), line)
}

func (l *fakeLauncher) write(path string, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write(b)
	_ = f.Close()
}

// succeed ends a running launcher with Succeeded and exit 0.
func (l *fakeLauncher) succeed(reason string) {
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	if ended {
		return
	}
	code := 0
	l.emit(launcherapi.EventSucceeded, launcherapi.PhaseSucceeded, reason, &code)
	l.end(launchrt.Exit{Code: 0, Reason: launchrt.ReasonCompleted})
}

// end makes the launcher exit once.
func (l *fakeLauncher) end(e launchrt.Exit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended, l.exit = true, e
	close(l.done)
}

func (l *fakeLauncher) ID() string            { return "fake pid " + strconv.Itoa(l.ref.PID) }
func (l *fakeLauncher) Ref() launchrt.Ref     { return l.ref }
func (l *fakeLauncher) Done() <-chan struct{} { return l.done }

func (l *fakeLauncher) Exit() launchrt.Exit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exit
}

// Signal: SIGTERM stops the VM (Succeeded, exit 0), SIGKILL kills it.
func (l *fakeLauncher) Signal(sig syscall.Signal) error {
	l.mu.Lock()
	ended := l.ended
	l.signals = append(l.signals, sig)
	l.mu.Unlock()
	if ended {
		return os.ErrProcessDone
	}
	switch sig {
	case syscall.SIGTERM:
		l.succeed(launcherapi.ReasonStopped)
	case syscall.SIGKILL:
		l.end(launchrt.Exit{Code: 128 + int(sig), Signal: sig, Reason: launchrt.ReasonError})
	}
	return nil
}

func (l *fakeLauncher) Stop(context.Context, time.Duration) (bool, error) {
	_ = l.Signal(syscall.SIGTERM)
	<-l.done
	return false, nil
}

// running reports whether the launcher has not ended.
func (l *fakeLauncher) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.ended
}

// launchrtKilled is how a launcher killed by SIGKILL ends.
func launchrtKilled() launchrt.Exit {
	return launchrt.Exit{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL, Reason: launchrt.ReasonError}
}
