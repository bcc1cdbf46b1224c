// Package launchrt is the one runtime seam for virt-launcher, shared by
// the local controller and the node agent: start a launcher, adopt one
// by PID after the caller restarted, signal it, wait for its end, stop
// it. It has the shape of Nomad's task drivers (StartTask, RecoverTask,
// SignalTask, WaitTask, StopTask).
//
// Process, the runtime of bare processes through pkg/spawn, lives here;
// the node agent adds a container runtime (podman) behind the same
// interface. Unit tests of the callers use a fake Runtime.
package launchrt

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// Runtime starts launchers and finds them again.
type Runtime interface {
	// Name says which runtime this is, for logs ("process", "podman").
	Name() string
	// Start starts a launcher; its stdout goes to spec's as it comes.
	Start(ctx context.Context, spec Spec) (Launcher, error)
	// Adopt takes over a launcher started before the caller restarted,
	// named by the Ref that Start gave it. Its end is noticed until ctx
	// ends; its exit code is not known (it is not the caller's child).
	Adopt(ctx context.Context, ref Ref) (Launcher, error)
}

// Launcher is one started (or adopted) launcher. Its methods are safe
// for concurrent use.
type Launcher interface {
	// ID names it for logs and checks: a PID or a container name.
	ID() string
	// Ref identifies it across restarts of the caller.
	Ref() Ref
	// Signal sends sig to it; one that has ended is not signalled.
	Signal(sig syscall.Signal) error
	// Done is closed once it has ended and Exit is known.
	Done() <-chan struct{}
	// Exit is how it ended; the zero Exit before Done.
	Exit() Exit
	// Stop asks it to end (SIGTERM), kills it (SIGKILL) once grace has
	// passed or ctx ends, and waits for it. killed says SIGKILL was
	// needed.
	Stop(ctx context.Context, grace time.Duration) (killed bool, err error)
}

// Spec is one launcher to start.
type Spec struct {
	// Path is the launcher binary (what a process runtime runs) and Args
	// its arguments, without the program.
	Path string
	Args []string
	// Env is added to the caller's environment; Dir is the working
	// folder (a container runtime mounts it read-write at the same path).
	Env []string
	Dir string
	// Stdout and Stderr receive the launcher's output; StdoutFile and
	// StderrFile, when set, are opened instead (Truncate empties them).
	Stdout, Stderr         io.Writer
	StdoutFile, StderrFile string
	Truncate               bool
	// Nice, when positive, runs the launcher at this lower CPU priority
	// from its first instruction (through nice(1)); QEMU inherits it.
	Nice int
	// Pod is what a container runtime needs beyond that; a process
	// runtime ignores it (and says so for limits it cannot enforce).
	Pod Pod
}

// Pod names the pod a launcher runs in, for a container runtime.
type Pod struct {
	// Namespace, Name and UID name the pod; Node the node.
	Namespace, Name, UID, Node string
	// Image is the compute container's image.
	Image string
	// ReadOnly are host folders mounted read-only at the same path (the
	// guest images).
	ReadOnly []string
	// Resources are the compute container's cgroup limits.
	Resources Resources
	// Mounts are the pod's volumes, bind-mounted read-write into the
	// container (a KubeVirt launcher pod's emptyDirs).
	Mounts []Mount
	// RunAs is who the container's processes run as, from the pod's
	// securityContext; the zero value is the image's own user. A process
	// runtime ignores it: its launchers run as the caller.
	RunAs RunAs
	// Entrypoint, when set, is the container's own command (the pod's
	// compute command, Args its arguments): it replaces the image's entry
	// point and runs as the container's PID 1, with no init before it, as
	// in a pod. Empty: the image's entry point under an init.
	Entrypoint string
}

// RunAs is a container's user and groups, as kubelet reads them from the
// pod's and the container's securityContext (the container's wins):
// runAsUser and runAsGroup, and the supplemental groups every container
// of the pod gets (fsGroup first, then supplementalGroups).
type RunAs struct {
	// UID and GID are runAsUser and runAsGroup; nil is the image's.
	UID, GID *int64
	// Groups are supplemental group IDs added to the process.
	Groups []int64
}

// Mount is one host folder bind-mounted into a container.
type Mount struct {
	// Host is the host folder, Container where it appears.
	Host, Container string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// Resources are a container's limits and shares, from the compute
// container's resources in the pod.
type Resources struct {
	// MemoryLimit is resources.limits.memory in bytes; 0 means none.
	MemoryLimit int64
	// CPULimitMilli is resources.limits.cpu in millicores; 0 means none.
	CPULimitMilli int64
	// CPURequestMilli is resources.requests.cpu in millicores, which
	// kubelet turns into CPU shares; 0 means none.
	CPURequestMilli int64
}

// Ref identifies a launcher process across restarts of its caller:
// StartTicks (the process start time) tells a reused PID apart.
type Ref struct {
	// PID is the launcher's process id.
	PID int `json:"pid"`
	// StartTicks is the process start time in clock ticks since boot.
	StartTicks uint64 `json:"startTicks"`
}

// Alive reports whether the process is still the one that was started.
func (r Ref) Alive() bool {
	st, err := procfs.ReadStat(r.PID)
	return err == nil && st.StartTicks == r.StartTicks && !st.Gone()
}

// Signal sends sig to the process if it is still the same one.
func (r Ref) Signal(sig syscall.Signal) error {
	if !r.Alive() {
		return fmt.Errorf("launcher pid %d is gone", r.PID)
	}
	if err := syscall.Kill(r.PID, sig); err != nil {
		return fmt.Errorf("signalling launcher pid %d: %w", r.PID, err)
	}
	return nil
}

// Exit is how a launcher ended, with kubelet's reason for its container.
type Exit struct {
	// Code is the exit status (128+n for a process killed by signal n);
	// -1 when unknown (not waited for, or adopted).
	Code int
	// Signal is the signal that killed it, or zero.
	Signal syscall.Signal
	// Reason is kubelet's reason: Completed (exit 0), Error, OOMKilled
	// (the kernel's OOM killer killed a process of the container), or
	// StartError (the runtime could not start it).
	Reason string
	// Message says more, for statuses and logs; may be empty.
	Message string
}

// Reasons kubelet reports for a terminated container.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
)

// ExitReason is kubelet's reason for a container that ran and exited
// with code: OOMKilled whenever its memory cgroup counted an OOM kill (as
// CRI runtimes report it, whatever the exit code), otherwise Completed or
// Error.
func ExitReason(code int, oomKills int) string {
	switch {
	case oomKills > 0:
		return ReasonOOMKilled
	case code == 0:
		return ReasonCompleted
	default:
		return ReasonError
	}
}

// String describes the end for messages: "exit code 3", "killed by
// signal killed", or the message of an end whose code is unknown.
func (e Exit) String() string {
	switch {
	case e.Code < 0 && e.Message != "":
		return e.Message
	case e.Code < 0:
		return "exit code unknown"
	case e.Signal != 0:
		return "killed by signal " + e.Signal.String()
	default:
		return fmt.Sprintf("exit code %d", e.Code)
	}
}
