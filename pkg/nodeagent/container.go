package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// computeContainer is the name KubeVirt gives the container that runs
// virt-launcher in a virt-launcher pod.
const computeContainer = "compute"

// launchArgs are the parts of KubeVirt's virt-launcher command line that
// this node honours.
type launchArgs struct {
	// SimulateCrash is KubeVirt's --simulate-crash (set for the
	// kubevirt.io/func-test-virt-launcher-fail-fast annotation).
	SimulateCrash bool
	// QEMUTimeout is --qemu-timeout; KubeVirt has already added its jitter.
	QEMUTimeout time.Duration
	// GracePeriod is --grace-period-seconds.
	GracePeriod time.Duration
}

// parseLaunchArgs reads the compute container's command and arguments as
// KubeVirt's pod template writes them (pkg/virt-controller/services).
func parseLaunchArgs(pod *k8sv1.Pod) (launchArgs, error) {
	var args []string
	found := false
	for _, c := range pod.Spec.Containers {
		if c.Name == computeContainer {
			args = append(append(args, c.Command...), c.Args...)
			found = true
		}
	}
	if !found {
		return launchArgs{}, fmt.Errorf("pod %s/%s has no %q container", pod.Namespace, pod.Name, computeContainer)
	}
	var la launchArgs
	for i := 0; i < len(args); i++ {
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("pod %s/%s: %s has no value", pod.Namespace, pod.Name, args[i])
			}
			i++
			return args[i], nil
		}
		switch args[i] {
		case "--simulate-crash":
			la.SimulateCrash = true
		case "--qemu-timeout":
			v, err := value()
			if err != nil {
				return launchArgs{}, err
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return launchArgs{}, fmt.Errorf("pod %s/%s: --qemu-timeout %q: %w", pod.Namespace, pod.Name, v, err)
			}
			la.QEMUTimeout = d
		case "--grace-period-seconds":
			v, err := value()
			if err != nil {
				return launchArgs{}, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return launchArgs{}, fmt.Errorf("pod %s/%s: --grace-period-seconds %q is not a whole number of seconds", pod.Namespace, pod.Name, v)
			}
			la.GracePeriod = time.Duration(n) * time.Second
		}
	}
	return la, nil
}

// container is the compute container of one virt-launcher pod on this
// node: our virt-launcher process once started, and what it reported.
type container struct {
	podKey types.NamespacedName
	podUID types.UID
	vmiKey types.NamespacedName
	vmiUID types.UID
	args   launchArgs
	dir    launcherapi.Dir

	image  string             // the compute container's image
	res    launchrt.Resources // the compute container's resources
	layout *podLayout         // the pod's command and volumes, in KubeVirt mode
	pod    *k8sv1.Pod         // the pod as bound, in kubelet-only mode
	podIP  string             // the pod's address on the pod network, in kubelet-only mode
	// states are the runtime's records of the pod's containers, in
	// kubelet-only mode (nil otherwise): their statuses come from them.
	states *podStates

	mu        sync.Mutex
	startedAt time.Time         // when the container started (pod Running)
	run       launchrt.Launcher // nil until the launcher is started
	running   bool              // the launcher reported Running
	final     *launcherapi.Event
	exited    bool
	exit      launchrt.Exit
	endedAt   time.Time
	signalled bool
	done      chan struct{}
}

// snapshot is a consistent copy of a container's state.
type snapshot struct {
	StartedAt time.Time
	Launched  bool
	Running   bool
	Final     *launcherapi.Event
	Exited    bool
	ExitCode  int
	// Reason and Message are kubelet's for the terminated container
	// (empty: derived from ExitCode).
	Reason, Message string
	EndedAt         time.Time
	// PodIP is the pod's address on the pod network (empty: none).
	PodIP string
	// Containers are the runtime's records of the pod's containers by
	// name, in kubelet-only mode (never nil there; nil otherwise).
	Containers map[string]runtimeState
}

func (c *container) snapshot() snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := snapshot{StartedAt: c.startedAt, Launched: c.run != nil, Running: c.running, Final: c.final,
		Exited: c.exited, ExitCode: c.exit.Code, Reason: c.exit.Reason, Message: c.exit.Message, EndedAt: c.endedAt, PodIP: c.podIP}
	if c.states != nil {
		s.Containers = c.states.all()
	}
	return s
}

// launcherManifest is the VMI as our virt-launcher reads it: identity,
// annotations and spec (status belongs to the cluster, not to the
// launch). The memory and CPU limits are left out: they are the pod's,
// enforced by the node on the compute container's cgroup (KubeVirt's
// virt-controller adds its overhead to them in the pod), not by the
// launcher, which refuses fields it does not honour.
func launcherManifest(vmi *v1.VirtualMachineInstance) ([]byte, error) {
	spec := vmi.Spec.DeepCopy()
	delete(spec.Domain.Resources.Limits, k8sv1.ResourceMemory)
	delete(spec.Domain.Resources.Limits, k8sv1.ResourceCPU)
	if len(spec.Domain.Resources.Limits) == 0 {
		spec.Domain.Resources.Limits = nil
	}
	m := struct {
		APIVersion string                        `json:"apiVersion"`
		Kind       string                        `json:"kind"`
		Metadata   metav1.ObjectMeta             `json:"metadata"`
		Spec       v1.VirtualMachineInstanceSpec `json:"spec"`
	}{
		APIVersion: v1.GroupVersion.String(),
		Kind:       "VirtualMachineInstance",
		Metadata: metav1.ObjectMeta{Name: vmi.Name, Namespace: vmi.Namespace, UID: vmi.UID,
			Labels: vmi.Labels, Annotations: vmi.Annotations},
		Spec: *spec,
	}
	return json.MarshalIndent(m, "", "  ")
}

// launchArgs is our virt-launcher's command line for this container.
func (c *container) launcherArgs(cfg *Config) launcherapi.Args {
	// The cluster's admission (KubeVirt's virt-api, with the KubeVirt CR's
	// gates) already took the VMI: the launcher's gates stand open.
	a := launcherapi.Args{Manifest: c.dir.Manifest(), EventFormat: launcherapi.FormatJSON, ConsoleLog: c.dir.Console(),
		SimulateCrash: c.args.SimulateCrash, FeatureGates: launcherapi.FeatureGateNames(), Extra: cfg.LauncherArgs}
	if c.args.QEMUTimeout > 0 {
		a.StartTimeout = launcherapi.FixedStartTimeout(c.args.QEMUTimeout)
	}
	if g := c.args.GracePeriod; g > 0 {
		a.GracePeriod = &g
	}
	return a
}

// launch starts our virt-launcher for vmi through the node's runtime.
// notify is called whenever the container's state changes (an event
// line, the exit).
func (c *container) launch(ctx context.Context, cfg *Config, rt Runtime, vmi *v1.VirtualMachineInstance, notify func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil || c.exited {
		return nil
	}
	// Owner-only: the folder holds the VMI and the launcher's log of it.
	if err := os.MkdirAll(string(c.dir), 0o700); err != nil {
		return fmt.Errorf("creating launcher folder: %w", err)
	}
	// A container of the pod's user writes its console log there.
	runAs := runAsOf(c.pod, computeOf(c.pod))
	if err := handTo(string(c.dir), runAs); err != nil {
		return err
	}
	data, err := launcherManifest(vmi)
	if err != nil {
		return fmt.Errorf("encoding VMI %s: %w", c.vmiKey, err)
	}
	if err := os.WriteFile(c.dir.Manifest(), data, 0o600); err != nil {
		return fmt.Errorf("writing VMI manifest: %w", err)
	}
	// Owner-only, so the launcher that reads it must own it.
	if err := handTo(c.dir.Manifest(), runAs); err != nil {
		return err
	}
	// The runtime opens the launcher's log by path (O_CREATE, 0644) and
	// keeps the mode of a file that exists: made here, it is owner-only.
	if err := ownerOnlyFile(c.dir.Log()); err != nil {
		return fmt.Errorf("creating the launcher's log: %w", err)
	}
	out, events, err := c.eventSink(cfg, notify)
	if err != nil {
		return err
	}
	args := c.launcherArgs(cfg).Build()
	run, err := rt.Start(ctx, launchrt.Spec{Path: cfg.LauncherPath, Args: args, Dir: string(c.dir),
		Stdout: out, StderrFile: c.dir.Log(), Truncate: true,
		Pod: launchrt.Pod{Namespace: c.podKey.Namespace, Name: c.podKey.Name, UID: string(c.podUID), Node: cfg.NodeName,
			Image: c.image, ReadOnly: cfg.ReadOnlyMounts, Resources: c.res, RunAs: runAs},
	})
	if err != nil {
		events.Close()
		return err
	}
	c.run = run
	cfg.Logger.Info("launcher started", "vmi", c.vmiKey.String(), "uid", c.vmiUID, "runtime", rt.Name(), "container", run.ID(),
		"args", strings.Join(args, " "))
	go c.watch(cfg.Logger, out, events, notify)
	return nil
}

// record notes what one launcher event says about the container.
func (c *container) record(ev launcherapi.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ev.Event == launcherapi.EventRunning:
		c.running = true
	case ev.Final():
		c.final = &ev
	}
}

// watch waits for the launcher to exit, then records the exit.
func (c *container) watch(log *slog.Logger, out *spawn.LineWriter, events *os.File, notify func()) {
	<-c.run.Done()
	out.Flush()
	events.Close()
	exit := c.run.Exit()
	if exit.Code < 0 {
		// Not waited for: as the old kubelet rule, a failure.
		exit.Code = 128
	}
	c.mu.Lock()
	c.exited, c.exit, c.endedAt = true, exit, time.Now()
	c.mu.Unlock()
	log.Info("launcher exited", "vmi", c.vmiKey.String(), "uid", c.vmiUID, "exitCode", exit.Code, "reason", exit.Reason, "message", exit.Message)
	close(c.done)
	notify()
}

// markExitedWithoutLaunch ends a container whose launcher never started
// (the pod was deleted first).
func (c *container) markExitedWithoutLaunch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil || c.exited {
		return
	}
	c.exited, c.exit, c.endedAt = true, launchrt.Exit{Reason: launchrt.ReasonCompleted}, time.Now()
	close(c.done)
}

// stop asks the launcher to shut the VM down (SIGTERM, as the kubelet does
// on pod deletion) and kills it after grace. It returns at once.
func (c *container) stop(log *slog.Logger, grace time.Duration) {
	c.mu.Lock()
	run, already := c.run, c.signalled
	c.signalled = true
	c.mu.Unlock()
	if run == nil {
		c.markExitedWithoutLaunch()
		return
	}
	if already {
		return
	}
	go func() {
		killed, err := run.Stop(context.Background(), grace)
		if killed {
			log.Warn("launcher ignored SIGTERM for its grace period, killed it", "vmi", c.vmiKey.String(), "grace", grace)
		}
		if err != nil {
			log.Error("stopping launcher", "vmi", c.vmiKey.String(), "err", err)
		}
	}()
}

// wait blocks until the container ended or ctx is done.
func (c *container) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// computeResources reads the compute container's image and the resources
// that become its cgroup limits.
func computeResources(pod *k8sv1.Pod) (string, launchrt.Resources, error) {
	for _, c := range pod.Spec.Containers {
		if c.Name != computeContainer {
			continue
		}
		var r launchrt.Resources
		if q, ok := c.Resources.Limits[k8sv1.ResourceMemory]; ok {
			r.MemoryLimit = q.Value()
		}
		if q, ok := c.Resources.Limits[k8sv1.ResourceCPU]; ok {
			r.CPULimitMilli = q.MilliValue()
		}
		if q, ok := c.Resources.Requests[k8sv1.ResourceCPU]; ok {
			r.CPURequestMilli = q.MilliValue()
		}
		if c.Image == "" {
			return "", r, fmt.Errorf("pod %s/%s: the %q container has no image", pod.Namespace, pod.Name, computeContainer)
		}
		return c.Image, r, nil
	}
	return "", launchrt.Resources{}, fmt.Errorf("pod %s/%s has no %q container", pod.Namespace, pod.Name, computeContainer)
}

// ownerOnlyFile makes path an empty file of mode 0600, whatever the umask
// and whatever mode a file left there had.
func ownerOnlyFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
