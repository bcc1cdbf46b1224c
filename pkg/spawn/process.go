package spawn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// KillWait bounds the wait for a process after SIGKILL; only a process
// stuck in uninterruptible sleep outlives it.
const KillWait = 10 * time.Second

// Spec describes one child process.
type Spec struct {
	// Path is the program and Args its arguments (without the program).
	Path string
	Args []string
	// Dir is the working folder; empty means this process's.
	Dir string
	// Env is added to this process's environment.
	Env []string
	// Stdout and Stderr receive the child's output; a nil writer discards
	// it. StdoutFile and StderrFile, when set, are opened instead (created,
	// appended to; Truncate empties them first); the same path for both
	// shares one descriptor.
	Stdout, Stderr         io.Writer
	StdoutFile, StderrFile string
	Truncate               bool
	// Group makes Signal and Stop act on the child's whole process group
	// (it always gets one of its own, so a terminal's Ctrl-C does not reach
	// it), and Stop kill what is left of the group after the child ended.
	Group bool
}

// Process is a started child. Its methods are safe for concurrent use.
type Process struct {
	cmd    *exec.Cmd
	group  bool
	cancel context.CancelFunc
	done   chan struct{}
	exit   Exit
	// startTicks is the child's start time, read before it was reaped.
	startTicks uint64
}

// Start starts spec's program in its own process group. The child
// outlives this process (use a Spawner for one that must not).
func Start(spec Spec) (*Process, error) { return start(spec, false, nil) }

// start builds and starts the command. dieWithParent sets the
// parent-death signal; run, if set, starts the command on the spawner's
// thread.
func start(spec Spec, dieWithParent bool, run func(*exec.Cmd) error) (*Process, error) {
	files, err := openOutputs(&spec)
	defer func() {
		for _, f := range files {
			_ = f.Close() // the child holds its own descriptors once started
		}
	}()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{group: spec.Group, cancel: cancel, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	if len(spec.Env) > 0 {
		cmd.Env = append(os.Environ(), spec.Env...)
	}
	cmd.Stdout, cmd.Stderr = spec.Stdout, spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if dieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// Cancelling the context is how Stop and Terminate ask the child to
	// end: os/exec calls Cancel only while the child has not been waited
	// for, so a reused PID is never signalled.
	cmd.Cancel = func() error { return p.signal(cmd, syscall.SIGTERM) }
	if run != nil {
		err = run(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("starting %s: %w", spec.Path, err)
	}
	p.cmd = cmd
	// Until the reaper below waits for it, the child's /proc entry stays,
	// even when it has already exited: its start time read here is its
	// own, never a reused PID's, and never missing.
	if st, err := procfs.ReadStat(cmd.Process.Pid); err == nil {
		p.startTicks = st.StartTicks
	}
	go func() {
		waitErr := cmd.Wait()
		p.exit = decodeExit(cmd.ProcessState, waitErr)
		close(p.done)
	}()
	return p, nil
}

// openOutputs opens StdoutFile and StderrFile into spec's writers and
// returns the files to close once the child started.
func openOutputs(spec *Spec) ([]*os.File, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if spec.Truncate {
		flags |= os.O_TRUNC
	}
	var files []*os.File
	open := func(path string, w *io.Writer) error {
		if path == "" {
			return nil
		}
		if path == spec.StdoutFile && spec.Stdout != nil && w == &spec.Stderr {
			spec.Stderr = spec.Stdout // the same file: one descriptor
			return nil
		}
		f, err := os.OpenFile(path, flags, 0o644)
		if err != nil {
			return fmt.Errorf("opening the output file of %s: %w", spec.Path, err)
		}
		files = append(files, f)
		*w = f
		return nil
	}
	if err := open(spec.StdoutFile, &spec.Stdout); err != nil {
		return files, err
	}
	return files, open(spec.StderrFile, &spec.Stderr)
}

// PID is the child's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// StartTicks is the child's start time in clock ticks since boot (field
// 22 of /proc/PID/stat), read before it could be reaped; with the PID it
// names the process even after the PID is reused. 0 when it could not be
// read.
func (p *Process) StartTicks() uint64 { return p.startTicks }

// Done is closed once the child has ended and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Exit is how the child ended; the zero Exit while it runs.
func (p *Process) Exit() Exit {
	if !p.Exited() {
		return Exit{}
	}
	return p.exit
}

// Signal sends sig to the child (to its group with Spec.Group). A child
// that has already ended is not an error.
func (p *Process) Signal(sig syscall.Signal) error { return p.signal(p.cmd, sig) }

func (p *Process) signal(cmd *exec.Cmd, sig syscall.Signal) error {
	var err error
	if p.group {
		err = syscall.Kill(-cmd.Process.Pid, sig)
	} else {
		err = cmd.Process.Signal(sig)
	}
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return os.ErrProcessDone
	}
	if err != nil {
		return fmt.Errorf("sending %v to pid %d: %w", sig, cmd.Process.Pid, err)
	}
	return nil
}

// Terminate asks the child to end (SIGTERM) and returns at once.
func (p *Process) Terminate() { p.cancel() }

// Stopped is how Stop ended a child.
type Stopped struct {
	// Exit is the child's end.
	Exit Exit
	// Already is set when the child had ended before Stop.
	Already bool
	// Killed is set when the child got SIGKILL, and Why says why (the
	// grace period passed, or ctx ended).
	Killed bool
	Why    string
}

// Stop ends the child: SIGTERM, then SIGKILL once grace has passed or ctx
// ends, whichever is first; with Spec.Group whatever is left of the group
// is killed too. It waits for the child and returns how it ended; the
// error is set only when it could not be reaped KillWait after SIGKILL.
// The grace is Stop's argument, not the command's Cmd.WaitDelay, because
// callers learn it only when they stop (a pod's deletion grace period).
func (p *Process) Stop(ctx context.Context, grace time.Duration) (Stopped, error) {
	if p.group {
		defer func() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }()
	}
	if p.Exited() {
		return Stopped{Exit: p.exit, Already: true}, nil
	}
	begin := time.Now()
	p.Terminate()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	var why string
	select {
	case <-p.done:
		return Stopped{Exit: p.exit}, nil
	case <-timer.C:
		why = fmt.Sprintf("still running %v after SIGTERM", grace)
	case <-ctx.Done():
		why = fmt.Sprintf("stop abandoned after %v: %v", time.Since(begin).Round(time.Millisecond), ctx.Err())
	}
	_ = p.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return Stopped{Exit: p.exit, Killed: true, Why: why}, nil
	case <-time.After(KillWait):
		return Stopped{Killed: true, Why: why}, fmt.Errorf("pid %d %s; still not reaped %v after SIGKILL", p.PID(), why, KillWait)
	}
}
