package nodeagent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/controller"
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
	QEMUTimeout string
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
			if _, err := time.ParseDuration(v); err != nil {
				return launchArgs{}, fmt.Errorf("pod %s/%s: --qemu-timeout %q: %w", pod.Namespace, pod.Name, v, err)
			}
			la.QEMUTimeout = v
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
	dir    string

	mu        sync.Mutex
	startedAt time.Time // when the container started (pod Running)
	cmd       *exec.Cmd // nil until the launcher is started
	running   bool      // the launcher reported Running
	final     *controller.LauncherEvent
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
	Final     *controller.LauncherEvent
	Exited    bool
	ExitCode  int
	EndedAt   time.Time
}

func (c *container) snapshot() snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return snapshot{StartedAt: c.startedAt, Launched: c.cmd != nil, Running: c.running, Final: c.final,
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

// launch starts our virt-launcher for vmi. notify is called whenever the
// container's state changes (an event line, the exit).
func (c *container) launch(cfg *Config, sp *spawn.Spawner, vmi *v1.VirtualMachineInstance, notify func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil || c.exited {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("creating launcher folder: %w", err)
	}
	data, err := launcherManifest(vmi)
	if err != nil {
		return fmt.Errorf("encoding VMI %s: %w", c.vmiKey, err)
	}
	manifest := filepath.Join(c.dir, "vmi.json")
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		return fmt.Errorf("writing VMI manifest: %w", err)
	}
	args := []string{"--event-format", "json", "--console-log", filepath.Join(c.dir, "console.log")}
	if c.args.SimulateCrash {
		args = append(args, "--simulate-crash")
	}
	if c.args.QEMUTimeout != "" {
		args = append(args, "--qemu-timeout", c.args.QEMUTimeout, "--qemu-timeout-jitter", "0s")
	}
	if c.args.GracePeriod > 0 {
		args = append(args, "--grace-period", c.args.GracePeriod.String())
	}
	args = append(append(args, cfg.LauncherArgs...), manifest)
	stderr, err := os.Create(filepath.Join(c.dir, "launcher.log"))
	if err != nil {
		return fmt.Errorf("creating launcher log: %w", err)
	}
	cmd := exec.Command(cfg.LauncherPath, args...)
	cmd.Stderr = stderr
	// A pod's processes die with its node: if the agent dies, so does the
	// launcher (started through the agent's spawner, so that the signal
	// is tied to the agent rather than to a worker thread), and its reaper
	// takes QEMU with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stderr.Close()
		return fmt.Errorf("launcher stdout: %w", err)
	}
	if err := sp.Start(cmd); err != nil {
		stderr.Close()
		return fmt.Errorf("starting %s: %w", cfg.LauncherPath, err)
	}
	stderr.Close()
	c.cmd = cmd
	cfg.Logger.Info("launcher started", "vmi", c.vmiKey.String(), "uid", c.vmiUID, "pid", cmd.Process.Pid, "args", strings.Join(args, " "))
	go c.watch(cfg.Logger, stdout, notify)
	return nil
}

// watch reads the launcher's event lines until it exits, then records the
// exit.
func (c *container) watch(log *slog.Logger, stdout io.Reader, notify func()) {
	events, _ := os.Create(filepath.Join(c.dir, "events.jsonl"))
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if events != nil {
			_, _ = events.Write(append(append([]byte(nil), line...), '\n'))
		}
		ev, err := controller.ParseEvent(line)
		if err != nil {
			log.Warn("launcher output is not an event", "vmi", c.vmiKey.String(), "err", err)
			continue
		}
		c.mu.Lock()
		switch {
		case ev.Event == controller.EventRunning:
			c.running = true
		case ev.Final():
			e := ev
			c.final = &e
		}
		c.mu.Unlock()
		notify()
	}
	if events != nil {
		events.Close()
	}
	err := c.cmd.Wait()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		} else {
			code = 128
		}
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
	if c.cmd != nil || c.exited {
		return
	}
	c.exited, c.exitCode, c.endedAt = true, 0, time.Now()
	close(c.done)
}

// stop asks the launcher to shut the VM down (SIGTERM, as the kubelet does
// on pod deletion) and kills it after grace. It returns at once.
func (c *container) stop(log *slog.Logger, grace time.Duration) {
	c.mu.Lock()
	cmd, already := c.cmd, c.signalled
	c.signalled = true
	c.mu.Unlock()
	if cmd == nil {
		c.markExitedWithoutLaunch()
		return
	}
	if already {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		select {
		case <-c.done:
		case <-time.After(grace):
			log.Warn("launcher ignored SIGTERM for its grace period, killing it", "vmi", c.vmiKey.String(), "grace", grace)
			_ = cmd.Process.Kill()
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
