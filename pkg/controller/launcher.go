package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
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
	// PollInterval is how often a live launcher's events file is read
	// (backing off to 8 times while it is quiet) and an adopted launcher
	// checked; zero means 50 ms.
	PollInterval time.Duration
	// Nice, when positive, runs launchers at this lower CPU priority
	// (through nice(1), so every thread of the launcher has it from its
	// first instruction), the way a node keeps pods below its system
	// daemons. Nice alone does not keep a crowd of crash-looping
	// launchers from starving the controller's timers (CFS weighs tasks,
	// and a thousand nice-10 launchers outweigh the controller's
	// threads), and QEMU inherits it.
	Nice int
	// FeatureGates are the KubeVirt feature gates every launcher gets
	// (launcherapi.Args.FeatureGates: HostDisk, Sidecar).
	FeatureGates []string
}

func (o LauncherOptions) poll() time.Duration {
	if o.PollInterval <= 0 {
		return 50 * time.Millisecond
	}
	return o.PollInterval
}

// LauncherRef identifies a launcher process across controller restarts
// (launchrt.Ref: its PID and start time), with what the controller knows
// of it.
type LauncherRef struct {
	launchrt.Ref
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
		GracePeriod: &grace, Seed: r.Seed, Attempt: r.Attempt, FeatureGates: o.FeatureGates, Extra: o.Args,
	}.Build()
}

// startLauncher writes the VMI into a fresh folder and starts virt-launcher
// on it through rt (the process runtime: in its own process group, so
// that a terminal's Ctrl-C or a SIGKILL of the controller does not reach
// it; a pod outlives its controller too).
func startLauncher(ctx context.Context, rt launchrt.Runtime, o LauncherOptions, r launchRequest) (*LauncherRef, launchrt.Launcher, error) {
	data, err := json.MarshalIndent(r.VMI, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encoding VMI %s: %w", r.VMI.UID, err)
	}
	stdout, stderr, err := createLauncherFiles(r.Dir, data)
	if err != nil {
		return nil, nil, err
	}
	defer stdout.Close()
	defer stderr.Close()
	l, err := rt.Start(ctx, launchrt.Spec{Path: o.Path, Args: launcherArgs(o, r), Env: o.Env, Dir: string(r.Dir),
		Stdout: stdout, Stderr: stderr, Nice: o.Nice})
	if err != nil {
		return nil, nil, err
	}
	return &LauncherRef{Ref: l.Ref(), Dir: string(r.Dir), UID: r.VMI.UID, StartedAt: r.Now}, l, nil
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
	// Owner-only: the folder holds the VMI (cloud-init user data
	// included) and what the launcher logs of it.
	if err := os.MkdirAll(string(dir), 0o700); err != nil {
		return nil, nil, fmt.Errorf("launcher folder: %w", err)
	}
	if err := os.WriteFile(dir.Manifest(), vmi, 0o600); err != nil {
		return nil, nil, fmt.Errorf("writing VMI manifest: %w", err)
	}
	stdout, err = os.OpenFile(dir.Events(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("launcher events file: %w", err)
	}
	stderr, err = os.OpenFile(dir.Log(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
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

// watchLauncher follows one launcher until it exits or ctx ends: it sends
// new events as they appear in its events file and, once, the exit.
// Launchers write their events to a file rather than a pipe, so that a
// restarted controller reads on where the last one stopped; an adopted
// launcher is not the controller's child, and its exit code is unknown.
func watchLauncher(ctx context.Context, clk clock.WithTicker, poll time.Duration, ref LauncherRef, l launchrt.Launcher, adopted bool, send func(launcherUpdate) bool) {
	var evs []launcherapi.Event
	lines := spawn.NewLineWriter(launcherapi.NewFollower(func(ev launcherapi.Event) { evs = append(evs, ev) }, nil).Line)
	f, err := os.Open(ref.Folder().Events())
	if err == nil {
		defer f.Close()
	}
	read := func() []launcherapi.Event {
		evs = nil
		if f != nil {
			_, _ = io.Copy(lines, f)
		}
		return evs
	}
	// Read the events file at poll while it grows, backing off to 8x poll
	// while it is quiet: a thousand idle launchers must not keep the
	// controller busy. The exit is seen at once through Done.
	interval := poll
	timer := clk.NewTimer(interval)
	defer timer.Stop()
	for {
		if got := read(); len(got) > 0 {
			if !send(launcherUpdate{uid: ref.UID, events: got}) {
				return
			}
			interval = poll
		} else {
			interval = min(interval*2, 8*poll)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			timer.Reset(interval)
			continue
		case <-l.Done():
		}
		read()
		lines.Flush()
		exit := l.Exit()
		up := launcherUpdate{uid: ref.UID, events: evs, exited: true, exitCode: exit.Code, exitDesc: exit.String()}
		if adopted {
			up.exitCode, up.exitDesc = -1, "exited while the controller was away (exit code unknown)"
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
