package nodeagent

import (
	"bytes"
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

	mu        sync.Mutex
	startedAt time.Time      // when the container started (pod Running)
	proc      *spawn.Process // nil until the launcher is started
	running   bool           // the launcher reported Running
	final     *launcherapi.Event
	exited    bool
	exitCode  int
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
	EndedAt   time.Time
}

func (c *container) snapshot() snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return snapshot{StartedAt: c.startedAt, Launched: c.proc != nil, Running: c.running, Final: c.final,
		Exited: c.exited, ExitCode: c.exitCode, EndedAt: c.endedAt}
}

// launcherManifest is the VMI as our virt-launcher reads it: identity,
// annotations and spec (status belongs to the cluster, not to the launch).
func launcherManifest(vmi *v1.VirtualMachineInstance) ([]byte, error) {
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
		Spec: vmi.Spec,
	}
	return json.MarshalIndent(m, "", "  ")
}

// launchArgs is our virt-launcher's command line for this container.
func (c *container) launcherArgs(cfg *Config) launcherapi.Args {
	a := launcherapi.Args{Manifest: c.dir.Manifest(), EventFormat: launcherapi.FormatJSON, ConsoleLog: c.dir.Console(),
		SimulateCrash: c.args.SimulateCrash, Extra: cfg.LauncherArgs}
	if c.args.QEMUTimeout > 0 {
		a.StartTimeout = launcherapi.FixedStartTimeout(c.args.QEMUTimeout)
	}
	if g := c.args.GracePeriod; g > 0 {
		a.GracePeriod = &g
	}
	return a
}

// launch starts our virt-launcher for vmi. notify is called whenever the
// container's state changes (an event line, the exit).
func (c *container) launch(cfg *Config, sp *spawn.Spawner, vmi *v1.VirtualMachineInstance, notify func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil || c.exited {
		return nil
	}
	if err := os.MkdirAll(string(c.dir), 0o755); err != nil {
		return fmt.Errorf("creating launcher folder: %w", err)
	}
	data, err := launcherManifest(vmi)
	if err != nil {
		return fmt.Errorf("encoding VMI %s: %w", c.vmiKey, err)
	}
	if err := os.WriteFile(c.dir.Manifest(), data, 0o644); err != nil {
		return fmt.Errorf("writing VMI manifest: %w", err)
	}
	events, err := os.Create(c.dir.Events())
	if err != nil {
		return fmt.Errorf("creating launcher events file: %w", err)
	}
	args := c.launcherArgs(cfg).Build()
	// A pod's processes die with its node: if the agent dies, so does the
	// launcher (started through the agent's spawner, so that the signal
	// is tied to the agent rather than to a worker thread), and its reaper
	// takes QEMU with it.
	out := spawn.NewLineWriter(func(line []byte) {
		_, _ = events.Write(append(append([]byte(nil), line...), '\n'))
		if len(bytes.TrimSpace(line)) == 0 {
			return
		}
		ev, err := launcherapi.ParseEvent(line)
		if err != nil {
			cfg.Logger.Warn("launcher output is not an event", "vmi", c.vmiKey.String(), "err", err)
			return
		}
		c.record(ev)
		notify()
	})
	proc, err := sp.Start(spawn.Spec{Path: cfg.LauncherPath, Args: args, Stdout: out, StderrFile: c.dir.Log(), Truncate: true})
	if err != nil {
		events.Close()
		return err
	}
	c.proc = proc
	cfg.Logger.Info("launcher started", "vmi", c.vmiKey.String(), "uid", c.vmiUID, "pid", proc.PID(), "args", strings.Join(args, " "))
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
	<-c.proc.Done()
	out.Flush()
	events.Close()
	code := c.proc.Exit().Code
	if code < 0 {
		code = 128 // not waited for: as the old kubelet rule, a failure
	}
	c.mu.Lock()
	c.exited, c.exitCode, c.endedAt = true, code, time.Now()
	c.mu.Unlock()
	log.Info("launcher exited", "vmi", c.vmiKey.String(), "uid", c.vmiUID, "exitCode", code)
	close(c.done)
	notify()
}

// markExitedWithoutLaunch ends a container whose launcher never started
// (the pod was deleted first).
func (c *container) markExitedWithoutLaunch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil || c.exited {
		return
	}
	c.exited, c.exitCode, c.endedAt = true, 0, time.Now()
	close(c.done)
}

// stop asks the launcher to shut the VM down (SIGTERM, as the kubelet does
// on pod deletion) and kills it after grace. It returns at once.
func (c *container) stop(log *slog.Logger, grace time.Duration) {
	c.mu.Lock()
	proc, already := c.proc, c.signalled
	c.signalled = true
	c.mu.Unlock()
	if proc == nil {
		c.markExitedWithoutLaunch()
		return
	}
	if already {
		return
	}
	go func() {
		st, err := proc.Stop(context.Background(), grace)
		if st.Killed {
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
