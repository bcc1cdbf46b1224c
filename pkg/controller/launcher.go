package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"
)

// LauncherOptions say how to run virt-launcher.
type LauncherOptions struct {
	// Path is the virt-launcher binary.
	Path string
	// Args are extra flags put before the manifest argument.
	Args []string
	// Env is added to the controller's environment for the launcher.
	Env []string
	// PollInterval is how often a live launcher's events file and process
	// are checked; zero means 50 ms.
	PollInterval time.Duration
	// Nice, when positive, runs launchers at this lower CPU priority
	// (through nice(1), so every thread of the launcher has it from its
	// first instruction), the way a node keeps pods below its system
	// daemons: a crowd of crash-looping launchers then cannot starve the
	// controller's timers. Nice alone does not achieve that (CFS weighs
	// tasks, and a thousand nice-10 launchers outweigh the controller's
	// threads), and QEMU inherits it.
	Nice int
	// CPUWeight, when positive, runs every launcher in one CPU cgroup of
	// this cgroup v2 cpu.weight (1 to 10000, where 100 is what the
	// controller itself has; on cgroup v1 cpu.shares = weight*1024/100,
	// at least 2), created by Controller.Run and removed when it returns.
	// Where no cgroup can be made (no cpu controller, no permission) the
	// controller says so once in its log and runs launchers without one.
	// On cgroup v1 each launcher has to be moved in after fork; see
	// cgroup.go for what that costs with hundreds of launches a second.
	CPUWeight int

	cgroup *launcherCgroup // set by Run when CPUWeight is usable
}

func (o LauncherOptions) poll() time.Duration {
	if o.PollInterval <= 0 {
		return 50 * time.Millisecond
	}
	return o.PollInterval
}

// LauncherRef identifies a launcher process across controller restarts.
// StartTicks (field 22 of /proc/PID/stat) tells a reused PID apart.
type LauncherRef struct {
	// PID is the launcher's process id.
	PID int `json:"pid"`
	// StartTicks is the process start time in clock ticks since boot.
	StartTicks uint64 `json:"startTicks"`
	// Dir holds vmi.json, events.jsonl (stdout) and launcher.log (stderr).
	Dir string `json:"dir"`
	// UID is the VMI it runs.
	UID types.UID `json:"uid"`
	// StartedAt is when the controller started it.
	StartedAt time.Time `json:"startedAt"`
}

// EventsPath is the launcher's stdout: one JSON event per line.
func (r LauncherRef) EventsPath() string { return filepath.Join(r.Dir, "events.jsonl") }

// LogPath is the launcher's stderr.
func (r LauncherRef) LogPath() string { return filepath.Join(r.Dir, "launcher.log") }

// Alive reports whether the process is still the one that was started.
func (r LauncherRef) Alive() bool {
	ticks, state, err := procStat(r.PID)
	return err == nil && ticks == r.StartTicks && state != 'Z' && state != 'X'
}

// Signal sends sig to the launcher if it is still the same process.
func (r LauncherRef) Signal(sig syscall.Signal) error {
	if !r.Alive() {
		return fmt.Errorf("launcher pid %d is gone", r.PID)
	}
	if err := syscall.Kill(r.PID, sig); err != nil {
		return fmt.Errorf("signalling launcher pid %d: %w", r.PID, err)
	}
	return nil
}

// procStat reads the start time and state of pid from /proc.
func procStat(pid int) (startTicks uint64, state byte, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name may hold spaces and parentheses; fields resume after
	// the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat starttime: %w", pid, err)
	}
	return ticks, fields[0][0], nil
}

// launchRequest is one launch of one VMI.
type launchRequest struct {
	VMI         *v1.VirtualMachineInstance
	Dir         string
	Attempt     int
	Seed        uint64
	QEMUTimeout time.Duration
	GracePeriod time.Duration
	Now         time.Time
}

// launcherArgs builds the launcher's command line. The controller has
// already jittered the timeout, so the launcher adds none (as KubeVirt's
// controller does when it renders the pod).
func launcherArgs(o LauncherOptions, r launchRequest, manifest string) []string {
	args := []string{
		"--qemu-timeout", r.QEMUTimeout.String(),
		"--qemu-timeout-jitter", "0s",
		"--seed", strconv.FormatUint(r.Seed, 10),
		"--attempt", strconv.Itoa(r.Attempt),
		"--console-log", filepath.Join(r.Dir, "console.log"),
		"--grace-period", r.GracePeriod.String(),
	}
	args = append(args, o.Args...)
	return append(args, manifest)
}

// startLauncher writes the VMI into a fresh folder and starts virt-launcher
// on it in its own process group, so that a terminal's Ctrl-C or a SIGKILL
// of the controller does not reach it (a pod outlives its controller too).
func startLauncher(o LauncherOptions, r launchRequest) (*LauncherRef, *exec.Cmd, error) {
	data, err := json.MarshalIndent(r.VMI, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encoding VMI %s: %w", r.VMI.UID, err)
	}
	ref := &LauncherRef{Dir: r.Dir, UID: r.VMI.UID, StartedAt: r.Now}
	manifest := filepath.Join(r.Dir, "vmi.json")
	stdout, stderr, err := createLauncherFiles(ref, manifest, data)
	if err != nil {
		return nil, nil, err
	}
	defer stdout.Close()
	defer stderr.Close()
	cmd := exec.Command(o.Path, launcherArgs(o, r, manifest)...)
	if o.Nice > 0 {
		if nice, err := exec.LookPath("nice"); err == nil {
			cmd = exec.Command(nice, append([]string{"-n", strconv.Itoa(o.Nice), "--", o.Path}, launcherArgs(o, r, manifest)...)...)
		}
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cmd, err = o.cgroup.start(cmd); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", o.Path, err)
	}
	ref.PID = cmd.Process.Pid
	if ticks, _, err := procStat(ref.PID); err == nil {
		ref.StartTicks = ticks
	}
	return ref, cmd, nil
}

// createSlots bounds how many threads create files at once, one per CPU.
// Every launch creates a folder and three files, and a crowd of VMs
// retrying together would otherwise put hundreds of threads into the
// kernel's inode allocator at once (each goroutine blocked in a syscall
// holds a thread, and the runtime starts another). ext4 without a journal
// rescans the inode bitmap past recently freed inodes, under the block
// group's spinlock when two allocators race for the same bit, so those
// threads spun: the controller burnt both CPUs in the kernel and its
// timers fired seconds late. Goroutines that wait here park without a
// thread.
var createSlots = make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))

// createLauncherFiles makes the launcher's folder, writes its VMI manifest
// and opens its stdout and stderr files.
func createLauncherFiles(ref *LauncherRef, manifest string, vmi []byte) (stdout, stderr *os.File, err error) {
	createSlots <- struct{}{}
	defer func() { <-createSlots }()
	if err := os.MkdirAll(ref.Dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("launcher folder: %w", err)
	}
	if err := os.WriteFile(manifest, vmi, 0o644); err != nil {
		return nil, nil, fmt.Errorf("writing VMI manifest: %w", err)
	}
	stdout, err = os.OpenFile(ref.EventsPath(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("launcher events file: %w", err)
	}
	stderr, err = os.OpenFile(ref.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		stdout.Close()
		return nil, nil, fmt.Errorf("launcher log file: %w", err)
	}
	return stdout, stderr, nil
}

// launcherUpdate is what a watcher reports about one launcher.
type launcherUpdate struct {
	uid    types.UID
	events []LauncherEvent
	// exited is set once, with the exit description.
	exited   bool
	exitCode int
	exitDesc string
}

// eventReader reads whole lines appended to an events file.
type eventReader struct {
	f       *os.File
	partial []byte
	bad     int
}

func (er *eventReader) read() []LauncherEvent {
	if er.f == nil {
		return nil
	}
	var out []LauncherEvent
	buf := make([]byte, 32<<10)
	for {
		n, err := er.f.Read(buf)
		er.partial = append(er.partial, buf[:n]...)
		if n == 0 || err != nil {
			break
		}
	}
	for {
		i := bytes.IndexByte(er.partial, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSpace(er.partial[:i])
		er.partial = er.partial[i+1:]
		if len(line) == 0 {
			continue
		}
		if ev, err := ParseEvent(line); err == nil {
			out = append(out, ev)
		} else {
			er.bad++
		}
	}
	return out
}

// flush returns a final unterminated line, if any, once the writer is gone.
func (er *eventReader) flush() []LauncherEvent {
	out := er.read()
	if line := bytes.TrimSpace(er.partial); len(line) > 0 {
		if ev, err := ParseEvent(line); err == nil {
			out = append(out, ev)
		}
		er.partial = nil
	}
	return out
}

// watchLauncher follows one launcher until it exits or ctx ends: it sends
// new events as they appear in the events file and, once, the exit. cmd is
// nil for a launcher adopted after a controller restart; it is not our
// child, so its exit is noticed through /proc and its exit code is unknown.
func watchLauncher(ctx context.Context, clk clock.WithTicker, poll time.Duration, ref LauncherRef, cmd *exec.Cmd, send func(launcherUpdate) bool) {
	er := &eventReader{}
	if f, err := os.Open(ref.EventsPath()); err == nil {
		er.f = f
		defer f.Close()
	}
	done := make(chan struct{})
	var waitErr error
	if cmd != nil {
		go func() { waitErr = cmd.Wait(); close(done) }()
	}
	// Poll the events file at poll while it grows, backing off to 8x poll
	// while it is quiet: a thousand idle launchers must not keep the
	// controller busy. A child's exit is seen at once through Wait.
	interval := poll
	timer := clk.NewTimer(interval)
	defer timer.Stop()
	for {
		evs := er.read()
		if len(evs) > 0 && !send(launcherUpdate{uid: ref.UID, events: evs}) {
			return
		}
		if len(evs) > 0 {
			interval = poll
		} else {
			interval = min(interval*2, 8*poll)
		}
		exited := false
		select {
		case <-ctx.Done():
			return
		case <-done:
			exited = true
		case <-timer.C():
			exited = cmd == nil && !ref.Alive()
			timer.Reset(interval)
		}
		if !exited {
			continue
		}
		up := launcherUpdate{uid: ref.UID, events: er.flush(), exited: true, exitCode: -1}
		if cmd != nil {
			up.exitCode, up.exitDesc = describeExit(cmd.ProcessState, waitErr)
		} else {
			up.exitDesc = "exited while the controller was away (exit code unknown)"
		}
		send(up)
		return
	}
}

func describeExit(ps *os.ProcessState, waitErr error) (int, string) {
	if ps == nil {
		return -1, fmt.Sprintf("wait failed: %v", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), "killed by signal " + ws.Signal().String()
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return ps.ExitCode(), waitErr.Error()
	}
	return ps.ExitCode(), fmt.Sprintf("exit code %d", ps.ExitCode())
}

// tail returns the last n bytes of a file, for messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}
