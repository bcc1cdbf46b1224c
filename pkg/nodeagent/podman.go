package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/memcg"
	"github.com/crashloop-harness/crashloop/pkg/podmanrm"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// Labels the podman runtime puts on every compute container. The first
// four are the ones CRI runtimes (containerd, CRI-O) put on a pod's
// containers, so that a pod's containers are found by its UID.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
	// LabelNode names the node whose agent made the container.
	LabelNode = "dev.crashloop.node"
)

// Podman is the runtime of real containers: each compute container is a
// rootful `podman run` of the image the pod names, unprivileged, with the
// pod's resources as the container's cgroup limits. Its events are the
// container's stdout, its exit code the container's, and an OOM kill is
// read from the container's memory cgroup while the container runs.
type Podman struct {
	// Path is the podman binary; empty means "podman" from PATH.
	Path string
	// OCIRuntime is podman's --runtime; empty means "runc" (crun refuses
	// hybrid cgroup hosts such as these).
	OCIRuntime string
	// CacheDir is a host folder mounted at the launcher's QEMU capability
	// cache, shared by the node's containers so that only the first
	// launch probes QEMU; empty means none (every launch probes).
	CacheDir string
	// KVM passes /dev/kvm into the containers (only where the node has
	// KVM that runs ordinary guests).
	KVM bool
	// Spawner, if set, starts the `podman run` clients so that they die
	// with the agent (their containers do not: conmon keeps them, and
	// RemoveLeftovers removes them at the next start).
	Spawner *spawn.Spawner
	// Logger receives the runtime's logs.
	Logger *slog.Logger
	// CgroupRoot is where the cgroup filesystems are mounted; empty means
	// /sys/fs/cgroup.
	CgroupRoot string
	// Poll is how often a running container's OOM-kill counter is read
	// besides at every line of its output; 0 means 100 ms.
	Poll time.Duration
}

// Name is "podman".
func (*Podman) Name() string { return "podman" }

func (r *Podman) path() string {
	if r.Path == "" {
		return "podman"
	}
	return r.Path
}

func (r *Podman) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

// ContainerName is the compute container's name for a pod, in kubelet's
// (dockershim's) form k8s_<container>_<pod>_<namespace>_<pod UID>_<attempt>.
func ContainerName(namespace, pod, uid string) string {
	return fmt.Sprintf("k8s_%s_%s_%s_%s_0", computeContainer, pod, namespace, uid)
}

// RunArgs is the `podman run` command line (without the program) for spec:
// removed when it ends, labelled with the pod, runc, catatonit as PID 1
// (--init; none when the pod names its own entry point, which is then
// PID 1 as in a pod), no network (the test guests have none; QEMU's user network
// needs none), explicit rlimits (these sandboxes lack CAP_SYS_RESOURCE to
// raise them), the pod folder read-write and the guest images read-only
// at the same paths, the pod's volumes, the capability cache (the user's
// own sub-folder when the pod names a user), the pod's user and groups
// (--user, --group-add), /dev/kvm where usable, and the
// compute container's resources as kubelet maps them: the memory limit as
// the memory cgroup's limit with no swap beyond it, the CPU limit as a CFS
// quota (--cpus), the CPU request as CPU shares.
func (r *Podman) RunArgs(spec launchrt.Spec) []string {
	pod := spec.Pod
	rt := r.OCIRuntime
	if rt == "" {
		rt = "runc"
	}
	args := []string{"run", "--rm", "--pull", "never", "--runtime", rt}
	if pod.Entrypoint == "" {
		args = append(args, "--init")
	}
	args = append(args, "--network", "none",
		"--name", ContainerName(pod.Namespace, pod.Name, pod.UID),
		"--label", LabelPodUID+"="+pod.UID,
		"--label", LabelPodName+"="+pod.Name,
		"--label", LabelPodNamespace+"="+pod.Namespace,
		"--label", LabelContainerName+"="+computeContainer,
		"--label", LabelNode+"="+pod.Node,
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
		"-v", spec.Dir+":"+spec.Dir)
	for _, m := range pod.Mounts {
		v := m.Host + ":" + m.Container
		if m.ReadOnly {
			v += ":ro"
		}
		args = append(args, "-v", v)
	}
	for _, d := range pod.ReadOnly {
		args = append(args, "-v", d+":"+d+":ro")
	}
	if r.CacheDir != "" {
		args = append(args, "-v", userCacheDir(r.CacheDir, pod.RunAs)+":"+launcherapi.DefaultCacheDir)
	}
	args = append(args, podmanRunAs(pod.RunAs)...)
	if r.KVM {
		args = append(args, "--device", "/dev/kvm")
	}
	res := pod.Resources
	if res.MemoryLimit > 0 {
		m := strconv.FormatInt(res.MemoryLimit, 10)
		args = append(args, "--memory", m, "--memory-swap", m)
	}
	if res.CPULimitMilli > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(float64(res.CPULimitMilli)/1000, 'f', -1, 64))
	}
	if res.CPURequestMilli > 0 {
		args = append(args, "--cpu-shares", strconv.FormatInt(cpuShares(res.CPURequestMilli), 10))
	}
	if pod.Entrypoint != "" {
		args = append(args, "--entrypoint", pod.Entrypoint)
	}
	args = append(args, pod.Image)
	return append(args, spec.Args...)
}

// cpuShares is kubelet's MilliCPUToShares: 1024 shares per CPU, at least 2.
func cpuShares(milli int64) int64 {
	return max(milli*1024/1000, 2)
}

// Check reports whether podman works here with an overlay store and has
// image (no pull: there is no registry), with a sentence saying why not.
func (r *Podman) Check(ctx context.Context, image string) error {
	if _, err := exec.LookPath(r.path()); err != nil {
		return fmt.Errorf("podman is not installed (%w)", err)
	}
	driver, err := r.podman(ctx, "info", "--format", "{{.Store.GraphDriverName}}")
	if err != nil {
		return fmt.Errorf("podman does not work here: podman info: %v %s", err, driver)
	}
	if driver != "overlay" {
		// vfs copies the image for every container (seconds) and changes
		// file ctimes, which throws libvirt's capability cache away.
		return fmt.Errorf("podman's store uses the %q driver, not overlay (make image says which CONTAINERS_STORAGE_CONF to export)", driver)
	}
	if out, err := r.podman(ctx, "image", "exists", image); err != nil {
		return fmt.Errorf("podman has no image %s (build it with `make image`): %v %s", image, err, out)
	}
	return nil
}

// RemoveLeftovers removes the containers a previous agent of node left
// (an agent killed before it could stop them), found by LabelNode.
func (r *Podman) RemoveLeftovers(ctx context.Context, node string) error {
	out, err := r.podman(ctx, "ps", "--all", "--filter", "label="+LabelNode+"="+node, "--format", "{{.Names}}")
	if err != nil {
		return fmt.Errorf("listing leftover containers of node %s: %v %s", node, err, out)
	}
	names := strings.Fields(out)
	if len(names) == 0 {
		return nil
	}
	r.logger().Warn("removing containers a previous node agent left", "node", node, "containers", names)
	if err := podmanrm.Remove(ctx, r.podman, names...); err != nil {
		return fmt.Errorf("removing leftover containers: %w", err)
	}
	return nil
}

// podman runs one podman command to completion and returns its output.
func (r *Podman) podman(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, r.path(), args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Start runs `podman run` for spec; it returns once the client started.
func (r *Podman) Start(_ context.Context, spec launchrt.Spec) (launchrt.Launcher, error) {
	c := &podmanContainer{r: r, name: ContainerName(spec.Pod.Namespace, spec.Pod.Name, spec.Pod.UID),
		stderr: spec.StderrFile, begin: time.Now(), done: make(chan struct{}), stopped: make(chan struct{})}
	out := &oomReadingWriter{c: c, next: spec.Stdout}
	var errOut io.Writer
	if spec.Stderr != nil {
		// A container that logs only on stderr (KubeVirt's monitor) is
		// seen running, and followed, from its first line there.
		errOut = &oomReadingWriter{c: c, next: spec.Stderr}
	}
	if err := prepareUserCacheDir(r.CacheDir, spec.Pod.RunAs); err != nil {
		return nil, err
	}
	// The client is a bare process: the process runtime runs it.
	client := launchrt.Process{Spawner: r.Spawner}
	p, err := client.Start(context.Background(), launchrt.Spec{Path: r.path(), Args: r.RunArgs(spec), Dir: spec.Dir,
		Stdout: out, Stderr: errOut, StderrFile: spec.StderrFile, Truncate: true})
	if err != nil {
		return nil, err
	}
	c.proc, c.ref = p, p.Ref()
	go c.watch()
	return c, nil
}

// Adopt refuses: a container left by an agent that died is removed
// (RemoveLeftovers), since its `podman run` client died with the agent.
func (r *Podman) Adopt(_ context.Context, ref launchrt.Ref) (launchrt.Launcher, error) {
	return nil, fmt.Errorf("the podman runtime does not adopt containers (podman run pid %d): a new agent removes what an earlier one left", ref.PID)
}

// podmanContainer is one `podman run` and the container it made.
type podmanContainer struct {
	r      *Podman
	name   string
	stderr string
	begin  time.Time
	proc   launchrt.Launcher // the podman run client
	ref    launchrt.Ref      // of the podman run client

	firstOutput sync.Once // the container's first output line

	mu      sync.Mutex
	output  bool            // the container wrote on its stdout: it ran
	cgroup  string          // the container's cgroup path, once known
	oom     *memcg.Follower // its OOM-kill counter, once known
	exit    launchrt.Exit
	done    chan struct{}
	stopped chan struct{} // closed when the OOM follower must end
}

func (c *podmanContainer) ID() string            { return c.name }
func (c *podmanContainer) Ref() launchrt.Ref     { return c.ref }
func (c *podmanContainer) Done() <-chan struct{} { return c.done }

// Signal sends sig to the container through `podman kill` (its init
// passes it on to the launcher).
func (c *podmanContainer) Signal(sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(context.Background(), spawn.KillWait)
	defer cancel()
	out, err := c.r.podman(ctx, "kill", "--signal", strings.TrimPrefix(unix.SignalName(sig), "SIG"), c.name)
	if err != nil {
		if notRunning(out) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("podman kill --signal %v %s: %v %s", sig, c.name, err, out)
	}
	return nil
}

func (c *podmanContainer) Exit() launchrt.Exit {
	select {
	case <-c.done:
	default:
		return launchrt.Exit{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exit
}

// oomReadingWriter passes the container's stdout on; the first write
// (the container is running, its cgroup exists) starts following the
// container's OOM-kill counter, and every write reads it: a launcher
// whose QEMU the kernel killed writes its final event while the
// container, and so its cgroup, still exists.
type oomReadingWriter struct {
	c    *podmanContainer
	next io.Writer
}

func (w *oomReadingWriter) Write(b []byte) (int, error) {
	w.c.firstOutput.Do(func() {
		w.c.mu.Lock()
		w.c.output = true
		w.c.mu.Unlock()
		w.c.r.logger().Info("container started", "container", w.c.name, "firstOutputAfter", time.Since(w.c.begin).Round(time.Millisecond))
		go w.c.followOOM()
	})
	w.c.readOOM()
	if w.next == nil {
		return len(b), nil
	}
	return w.next.Write(b)
}

// followOOM finds the container's memory cgroup and follows its OOM-kill
// counter (memcg.Follow) every Poll until the container ends (the counter
// goes with the cgroup, so it cannot be read afterwards).
func (c *podmanContainer) followOOM() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path, err := c.r.podman(ctx, "container", "inspect", "--format", "{{.State.CgroupPath}}", c.name)
	if err != nil || path == "" {
		level := slog.LevelWarn
		if notRunning(path) {
			level = slog.LevelDebug // it ended before it could be inspected
		}
		c.r.logger().Log(ctx, level, "cannot find the container's cgroup: OOM kills will not be seen", "container", c.name, "err", err, "out", path)
		return
	}
	poll := c.r.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	follow, stop := context.WithCancel(context.Background())
	f := memcg.Follow(follow, memcg.CounterFile(c.r.CgroupRoot, path), poll)
	c.mu.Lock()
	c.cgroup, c.oom = path, f
	c.mu.Unlock()
	<-c.stopped
	stop()
}

// readOOM reads the OOM-kill counter now, if it is followed.
func (c *podmanContainer) readOOM() {
	c.mu.Lock()
	f := c.oom
	c.mu.Unlock()
	if f != nil {
		_ = f.ReadNow() // an error: the cgroup is gone with the container
	}
}

// oomKills is the highest OOM-kill count read.
func (c *podmanContainer) oomKills() int {
	c.mu.Lock()
	f := c.oom
	c.mu.Unlock()
	if f == nil {
		return 0
	}
	n, _ := f.Most()
	return n
}

// watch waits for `podman run` to end and decodes the container's exit.
func (c *podmanContainer) watch() {
	<-c.proc.Done()
	c.readOOM()
	close(c.stopped)
	e := c.proc.Exit()
	kills := c.oomKills()
	c.mu.Lock()
	started := c.output || c.cgroup != ""
	c.mu.Unlock()
	exit := podmanExit(e, started, kills)
	if exit.Reason == launchrt.ReasonStartError {
		if lines, err := spawn.Tail(c.stderr, 5); err == nil && len(lines) > 0 {
			exit.Message += ": " + strings.Join(lines, " | ")
		}
	}
	if e.Signal != 0 || e.Code < 0 || e.Code >= 125 {
		// The client did not see the container through (killed, or
		// podman failed): make sure nothing is left of it.
		c.remove()
	}
	c.mu.Lock()
	c.exit = exit
	c.mu.Unlock()
	c.r.logger().Info("container exited", "container", c.name, "exitCode", exit.Code, "reason", exit.Reason, "oomKills", kills)
	close(c.done)
}

// remove removes the container if it is still there.
func (c *podmanContainer) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := podmanrm.Remove(ctx, c.r.podman, c.name); err != nil {
		c.r.logger().Error("removing container", "container", c.name, "err", err)
	}
}

// podmanExit is kubelet's view of a compute container run by `podman
// run`, which exits with the container's code, or with 125 (podman's own
// error), 126 (the entrypoint cannot be run) or 127 (not found) when the
// container did not start. A container that never ran is a StartError
// with code 128, as CRI runtimes report it; one whose memory cgroup
// counted OOM kills is OOMKilled whatever its code (the kernel may kill
// QEMU and leave the launcher to exit on its own).
func podmanExit(e launchrt.Exit, started bool, oomKills int) launchrt.Exit {
	switch {
	case e.Code < 0:
		return launchrt.Exit{Code: 128, Reason: launchrt.ReasonError, Message: "podman run could not be waited for"}
	case e.Signal != 0:
		return launchrt.Exit{Code: e.Code, Reason: launchrt.ExitReason(e.Code, oomKills),
			Message: fmt.Sprintf("the podman run client was killed by %v", e.Signal)}
	case !started && e.Code >= 125 && e.Code <= 127:
		return launchrt.Exit{Code: 128, Reason: launchrt.ReasonStartError, Message: fmt.Sprintf("podman run exited %d before the container ran", e.Code)}
	}
	x := launchrt.Exit{Code: e.Code, Reason: launchrt.ExitReason(e.Code, oomKills)}
	if x.Reason == launchrt.ReasonOOMKilled {
		x.Message = fmt.Sprintf("the kernel's OOM killer killed %d process(es) of the container (memory cgroup oom_kill %d); the container exited %d", oomKills, oomKills, e.Code)
	}
	return x
}

// Stop sends SIGTERM to the container (its init passes it to the
// launcher), SIGKILL once grace has passed, and waits for `podman run` to
// end. A container not created yet is waited for until grace passes.
func (c *podmanContainer) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	termed := false
	for !termed {
		select {
		case <-c.done:
			return false, nil
		default:
		}
		out, err := c.r.podman(ctx, "kill", "--signal", "TERM", c.name)
		if err == nil {
			termed = true
			break
		}
		if !notRunning(out) {
			c.r.logger().Warn("podman kill -s TERM failed", "container", c.name, "err", err, "out", out)
		}
		select {
		case <-c.done:
			return false, nil
		case <-deadline.C:
			return true, c.kill()
		case <-ctx.Done():
			return true, c.kill()
		case <-time.After(100 * time.Millisecond): // not created or not started yet
		}
	}
	select {
	case <-c.done:
		return false, nil
	case <-deadline.C:
	case <-ctx.Done():
	}
	return true, c.kill()
}

// kill sends SIGKILL to the container (and to the client, should the
// container not exist) and waits for the client to end.
func (c *podmanContainer) kill() error {
	kctx, cancel := context.WithTimeout(context.Background(), spawn.KillWait)
	defer cancel()
	if out, err := c.r.podman(kctx, "kill", "--signal", "KILL", c.name); err != nil && !notRunning(out) {
		c.r.logger().Warn("podman kill -s KILL failed", "container", c.name, "err", err, "out", out)
	}
	select {
	case <-c.done:
		return nil
	case <-time.After(spawn.KillWait):
	}
	// The client outlived its container's SIGKILL: end it; watch removes
	// what is left.
	_ = c.proc.Signal(syscall.SIGKILL)
	select {
	case <-c.done:
		return nil
	case <-time.After(time.Minute):
		return errors.New("podman run did not end a minute after SIGKILL of " + c.name)
	}
}

// notRunning reports whether podman's output says the container is not
// there (yet, or any more) or not running (created, not started yet; or
// ended).
func notRunning(out string) bool {
	out = strings.ToLower(out)
	return strings.Contains(out, "no such container") || strings.Contains(out, "not running") ||
		strings.Contains(out, "can only kill running containers")
}
