package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
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

// Folder is the launcher's launch folder (launcherapi.Dir): its VMI, its
// events (stdout), its log (stderr) and the guest's console.
func (r LauncherRef) Folder() launcherapi.Dir { return launcherapi.Dir(r.Dir) }

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
	Dir         launcherapi.Dir
	Attempt     int
	Seed        launcherapi.Seed
	QEMUTimeout time.Duration
	GracePeriod time.Duration
	Now         time.Time
}

// launcherArgs builds the launcher's command line. The controller has
// already drawn the timeout, so the launcher adds no jitter (as KubeVirt's
// controller does when it renders the pod). o.Args come last, so that
// they win.
func launcherArgs(o LauncherOptions, r launchRequest) []string {
	grace := r.GracePeriod
	return launcherapi.Args{
		Manifest: r.Dir.Manifest(), ConsoleLog: r.Dir.Console(), StartTimeout: launcherapi.FixedStartTimeout(r.QEMUTimeout),
		GracePeriod: &grace, Seed: r.Seed, Attempt: r.Attempt, Extra: o.Args,
	}.Build()
}

// startLauncher writes the VMI into a fresh folder and starts virt-launcher
// on it (spawn.Start: in its own process group, so that a terminal's
// Ctrl-C or a SIGKILL of the controller does not reach it; a pod outlives
// its controller too).
func startLauncher(o LauncherOptions, r launchRequest) (*LauncherRef, *spawn.Process, error) {
	data, err := json.MarshalIndent(r.VMI, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encoding VMI %s: %w", r.VMI.UID, err)
	}
	ref := &LauncherRef{Dir: string(r.Dir), UID: r.VMI.UID, StartedAt: r.Now}
	stdout, stderr, err := createLauncherFiles(r.Dir, data)
	if err != nil {
		return nil, nil, err
	}
	defer stdout.Close()
	defer stderr.Close()
	spec := spawn.Spec{Path: o.Path, Args: launcherArgs(o, r), Env: o.Env, Stdout: stdout, Stderr: stderr}
	if o.Nice > 0 {
		if nice, err := exec.LookPath("nice"); err == nil {
			spec.Path, spec.Args = nice, append([]string{"-n", strconv.Itoa(o.Nice), "--", o.Path}, spec.Args...)
		}
	}
	if o.cgroup != nil {
		spec.Starter = o.cgroup.start
	}
	proc, err := spawn.Start(spec)
	if err != nil {
		return nil, nil, err
	}
	ref.PID = proc.PID()
	if ticks, _, err := procStat(ref.PID); err == nil {
		ref.StartTicks = ticks
	}
	return ref, proc, nil
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
func createLauncherFiles(dir launcherapi.Dir, vmi []byte) (stdout, stderr *os.File, err error) {
	createSlots <- struct{}{}
	defer func() { <-createSlots }()
	if err := os.MkdirAll(string(dir), 0o755); err != nil {
		return nil, nil, fmt.Errorf("launcher folder: %w", err)
	}
	if err := os.WriteFile(dir.Manifest(), vmi, 0o644); err != nil {
		return nil, nil, fmt.Errorf("writing VMI manifest: %w", err)
	}
	stdout, err = os.OpenFile(dir.Events(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("launcher events file: %w", err)
	}
	stderr, err = os.OpenFile(dir.Log(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		stdout.Close()
		return nil, nil, fmt.Errorf("launcher log file: %w", err)
	}
	return stdout, stderr, nil
}

// launcherUpdate is what a watcher reports about one launcher.
type launcherUpdate struct {
	uid    types.UID
	events []launcherapi.Event
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

func (er *eventReader) read() []launcherapi.Event {
	if er.f == nil {
		return nil
	}
	var out []launcherapi.Event
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
		if ev, err := launcherapi.ParseEvent(line); err == nil {
			out = append(out, ev)
		} else {
			er.bad++
		}
	}
	return out
}

// flush returns a final unterminated line, if any, once the writer is gone.
func (er *eventReader) flush() []launcherapi.Event {
	out := er.read()
	if line := bytes.TrimSpace(er.partial); len(line) > 0 {
		if ev, err := launcherapi.ParseEvent(line); err == nil {
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
func watchLauncher(ctx context.Context, clk clock.WithTicker, poll time.Duration, ref LauncherRef, proc *spawn.Process, send func(launcherUpdate) bool) {
	er := &eventReader{}
	if f, err := os.Open(ref.Folder().Events()); err == nil {
		er.f = f
		defer f.Close()
	}
	var done <-chan struct{}
	if proc != nil {
		done = proc.Done()
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
			exited = proc == nil && !ref.Alive()
			timer.Reset(interval)
		}
		if !exited {
			continue
		}
		up := launcherUpdate{uid: ref.UID, events: er.flush(), exited: true, exitCode: -1}
		if proc != nil {
			up.exitCode, up.exitDesc = proc.Exit().Code, proc.Exit().String()
		} else {
			up.exitDesc = "exited while the controller was away (exit code unknown)"
		}
		send(up)
		return
	}
}

// lastLogLine is the end of a launcher's log, for the message of a
// launcher that crashed: its last line, at most 300 bytes of it.
func lastLogLine(dir launcherapi.Dir) string {
	lines, _ := spawn.Tail(dir.Log(), 1)
	if len(lines) == 0 {
		return ""
	}
	l := strings.TrimSpace(lines[0])
	if len(l) > 300 {
		l = l[len(l)-300:]
	}
	return l
}
