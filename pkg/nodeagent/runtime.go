package nodeagent

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// Runtime runs the compute container of a virt-launcher pod: the part of
// kubelet's container runtime (CRI) that the node agent needs. Two
// implementations: Process runs our virt-launcher as a bare child process,
// Podman runs the image the pod names as a real container.
type Runtime interface {
	// Name says which runtime this is, for logs ("process", "podman").
	Name() string
	// Start starts the container; its stdout goes to spec.Stdout as it
	// comes.
	Start(ctx context.Context, spec ContainerSpec) (RunningContainer, error)
}

// RunningContainer is one started compute container.
type RunningContainer interface {
	// ID names it for logs and checks: a PID or a container name.
	ID() string
	// Done is closed once the container has ended and Exit is known.
	Done() <-chan struct{}
	// Exit is how it ended; the zero ContainerExit before Done.
	Exit() ContainerExit
	// Stop asks it to end (SIGTERM), kills it (SIGKILL) once grace has
	// passed, and waits for it. killed says SIGKILL was needed.
	Stop(ctx context.Context, grace time.Duration) (killed bool, err error)
}

// ContainerSpec is what the node agent asks of a runtime for one pod.
type ContainerSpec struct {
	// PodNamespace, PodName and PodUID name the pod; NodeName the node.
	PodNamespace, PodName, PodUID, NodeName string
	// Image is the compute container's image (the process runtime ignores
	// it and runs LauncherPath).
	Image string
	// LauncherPath is our virt-launcher binary, for the process runtime.
	LauncherPath string
	// Args are the launcher's arguments (after the program).
	Args []string
	// Dir is the pod's folder (manifest, events, log, console): the
	// working folder, and mounted read-write at the same path.
	Dir string
	// ReadOnly are host folders mounted read-only at the same path (the
	// guest images).
	ReadOnly []string
	// Resources are the compute container's cgroup limits.
	Resources Resources
	// Stdout receives the container's stdout (the launcher's events);
	// StderrFile its stderr (and the runtime's own errors).
	Stdout     io.Writer
	StderrFile string
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

// ContainerExit is how a compute container ended, as kubelet reports it
// in ContainerStateTerminated.
type ContainerExit struct {
	// Code is the exit code (128+n for a process killed by signal n).
	Code int
	// Reason is kubelet's reason: "Completed" (exit 0), "Error",
	// "OOMKilled" (the kernel's OOM killer killed a process of the
	// container), or "StartError" (the runtime could not start it).
	Reason string
	// Message says more, for the pod status and logs.
	Message string
}

// Reasons kubelet reports for a terminated container.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
)

// exitReason is kubelet's reason for a container that ran and exited with
// code: OOMKilled whenever its memory cgroup counted an OOM kill (as CRI
// runtimes report it, whatever the exit code), otherwise Completed or
// Error.
func exitReason(code int, oomKills int) string {
	switch {
	case oomKills > 0:
		return ReasonOOMKilled
	case code == 0:
		return ReasonCompleted
	default:
		return ReasonError
	}
}

// Process is the runtime of bare processes: our virt-launcher started as a
// child of the node agent through spawn, with the agent's rlimits and no
// cgroup limits of its own.
type Process struct {
	// Spawner starts the launchers so that they die with the agent.
	Spawner *spawn.Spawner
	// Logger, if set, hears about limits that are not enforced.
	Logger *slog.Logger
}

// Name is "process".
func (Process) Name() string { return "process" }

// Start starts spec.LauncherPath with spec.Args in spec.Dir. The
// container's limits are not enforced: Logger hears it.
func (r Process) Start(_ context.Context, spec ContainerSpec) (RunningContainer, error) {
	if res := spec.Resources; (res.MemoryLimit > 0 || res.CPULimitMilli > 0) && r.Logger != nil {
		r.Logger.Warn("the process runtime does not enforce the compute container's limits", "pod", spec.PodNamespace+"/"+spec.PodName,
			"memoryLimit", res.MemoryLimit, "cpuLimitMilli", res.CPULimitMilli)
	}
	// A pod's processes die with its node: if the agent dies, so does
	// the launcher (started through the agent's spawner, so that the
	// signal is tied to the agent rather than to a worker thread), and
	// its reaper takes QEMU with it.
	p, err := r.Spawner.Start(spawn.Spec{Path: spec.LauncherPath, Args: spec.Args, Dir: spec.Dir,
		Stdout: spec.Stdout, StderrFile: spec.StderrFile, Truncate: true})
	if err != nil {
		return nil, err
	}
	return processContainer{p}, nil
}

type processContainer struct{ p *spawn.Process }

func (c processContainer) ID() string            { return "pid " + strconv.Itoa(c.p.PID()) }
func (c processContainer) Done() <-chan struct{} { return c.p.Done() }

func (c processContainer) Exit() ContainerExit {
	if !c.p.Exited() {
		return ContainerExit{}
	}
	return processExit(c.p.Exit())
}

// processExit is kubelet's view of a bare launcher's end.
func processExit(e spawn.Exit) ContainerExit {
	if e.Code < 0 {
		// Not waited for: as the old kubelet rule, a failure.
		return ContainerExit{Code: 128, Reason: ReasonError, Message: "the launcher could not be waited for"}
	}
	return ContainerExit{Code: e.Code, Reason: exitReason(e.Code, 0)}
}

func (c processContainer) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	st, err := c.p.Stop(ctx, grace)
	return st.Killed, err
}
