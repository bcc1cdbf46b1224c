package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// KubeVirtMode runs launcher pods as KubeVirt's own node would: the
// compute container runs the command line virt-controller rendered
// (/usr/bin/virt-launcher-monitor ...) in a podman container of the pod's
// image with the pod's emptyDir volumes, and a driver process beside it
// plays virt-handler's part over KubeVirt's gRPC protocol and reports
// the VMI's phase as launcherapi event lines.
type KubeVirtMode struct {
	// Driver is kubevirtmode's virt-handler-driver binary.
	Driver string
	// ImageDir is the node's guest image folder, mounted read-only at
	// the image's own image folder.
	ImageDir string
}

// imageDirInImage is where the launcher image reads its guest images
// (the image's VOLUME, images/launcher/Containerfile).
const imageDirInImage = "/usr/share/crashloop/images"

// podLayout is what KubeVirt mode reads from a launcher pod: the compute
// container's command line and the emptyDir volumes it mounts.
type podLayout struct {
	command []string
	volumes []podVolume
	// skipped are compute's mounts of other volume kinds, which this
	// node does not provide.
	skipped []string
}

type podVolume struct{ name, mountPath string }

// kubevirtLayout reads the pod's layout for KubeVirt mode.
func kubevirtLayout(pod *k8sv1.Pod) (podLayout, error) {
	emptyDirs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != computeContainer {
			continue
		}
		l := podLayout{command: append(append([]string(nil), c.Command...), c.Args...)}
		if len(c.Command) == 0 {
			return podLayout{}, fmt.Errorf("pod %s/%s: the %q container has no command (KubeVirt mode runs the pod's own command line)", pod.Namespace, pod.Name, computeContainer)
		}
		for _, m := range c.VolumeMounts {
			if !emptyDirs[m.Name] {
				l.skipped = append(l.skipped, m.Name)
				continue
			}
			if strings.Contains(m.Name, "/") || m.Name == "." || m.Name == ".." {
				return podLayout{}, fmt.Errorf("pod %s/%s: volume name %q: want a DNS label", pod.Namespace, pod.Name, m.Name)
			}
			l.volumes = append(l.volumes, podVolume{name: m.Name, mountPath: m.MountPath})
		}
		// A mount inside another (sockets in /var/run/kubevirt) after it,
		// as CRI runtimes order them: runc mounts in order.
		sort.SliceStable(l.volumes, func(i, j int) bool { return depth(l.volumes[i].mountPath) < depth(l.volumes[j].mountPath) })
		return l, nil
	}
	return podLayout{}, fmt.Errorf("pod %s/%s has no %q container", pod.Namespace, pod.Name, computeContainer)
}

func depth(path string) int { return strings.Count(filepath.Clean(path), "/") }

// launchKubeVirt starts the pod's compute container with its own command
// and the pod's volumes through rt, and the driver beside it through
// procs; the driver's event lines are the container's events.
func (c *container) launchKubeVirt(ctx context.Context, cfg *Config, rt, procs Runtime, vmi *v1.VirtualMachineInstance, notify func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil || c.exited {
		return nil
	}
	dir := string(c.dir)
	volumes, handler := filepath.Join(dir, "volumes"), filepath.Join(dir, "handler")
	mounts := []launchrt.Mount{{Host: cfg.KubeVirt.ImageDir, Container: imageDirInImage, ReadOnly: true}}
	for _, v := range c.layout.volumes {
		host := filepath.Join(volumes, v.name)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return fmt.Errorf("creating volume %s of the pod: %w", v.name, err)
		}
		if err := setVolumeOwnership(host, fsGroupOf(c.pod)); err != nil {
			return fmt.Errorf("volume %s of the pod: %w", v.name, err)
		}
		mounts = append(mounts, launchrt.Mount{Host: host, Container: v.mountPath})
	}
	if err := os.MkdirAll(handler, 0o700); err != nil {
		return fmt.Errorf("creating the driver's folder: %w", err)
	}
	data, err := json.Marshal(vmi)
	if err != nil {
		return fmt.Errorf("encoding VMI %s: %w", c.vmiKey, err)
	}
	vmiFile := filepath.Join(dir, "vmi.json")
	if err := os.WriteFile(vmiFile, data, 0o600); err != nil {
		return fmt.Errorf("writing the VMI for the driver: %w", err)
	}
	out, events, err := c.eventSink(cfg, notify)
	if err != nil {
		return err
	}
	computeLog, err := os.OpenFile(c.dir.Log(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		events.Close()
		return fmt.Errorf("creating the compute container's log: %w", err)
	}
	compute, err := rt.Start(ctx, launchrt.Spec{Path: c.layout.command[0], Args: c.layout.command[1:], Dir: dir,
		Stdout: computeLog, Stderr: computeLog,
		Pod: launchrt.Pod{Namespace: c.podKey.Namespace, Name: c.podKey.Name, UID: string(c.podUID), Node: cfg.NodeName,
			Image: c.image, Resources: c.res, Mounts: mounts, Entrypoint: c.layout.command[0],
			RunAs: runAsOf(c.pod, computeOf(c.pod))},
	})
	if err != nil {
		events.Close()
		computeLog.Close()
		return err
	}
	driverLog := filepath.Join(dir, "driver.log")
	driver, err := procs.Start(ctx, launchrt.Spec{Path: cfg.KubeVirt.Driver, Dir: dir, Stdout: out,
		StderrFile: driverLog, Truncate: true,
		Args: []string{"--vmi", vmiFile, "--pod-volumes", volumes, "--handler-dir", handler}})
	if err != nil {
		_, _ = compute.Stop(context.Background(), 0)
		events.Close()
		computeLog.Close()
		return fmt.Errorf("starting the driver beside pod %s: %w", c.podKey, err)
	}
	k := &kubevirtPod{compute: compute, driver: driver, done: make(chan struct{}), log: cfg.Logger, driverLog: driverLog}
	go k.watch(computeLog)
	c.run = k
	cfg.Logger.Info("launcher pod started in KubeVirt mode", "vmi", c.vmiKey.String(), "uid", c.vmiUID, "container", compute.ID(),
		"driver", driver.ID(), "command", strings.Join(c.layout.command, " "), "volumes", len(c.layout.volumes), "notProvided", c.layout.skipped)
	go c.watch(cfg.Logger, out, events, notify)
	return nil
}

// kubevirtPod is a launcher pod in KubeVirt mode as one launchrt.Launcher:
// its compute container and the driver beside it. It ends when both have
// ended; its exit is the compute container's. A stop request goes to the
// driver (virt-handler's graceful stop).
type kubevirtPod struct {
	compute, driver launchrt.Launcher
	done            chan struct{}
	log             *slog.Logger
	driverLog       string // the driver's stderr file
}

// driverAfterPod is how long the driver may outlive its pod's compute
// container before it is stopped (it notices the pod's end itself within
// a second).
const driverAfterPod = 5 * time.Second

// stopMargin is how long a stop waits beyond the grace period: the
// driver's KillVirtualMachine and DeleteVirtualMachine after it.
const stopMargin = 30 * time.Second

func (k *kubevirtPod) watch(computeLog *os.File) {
	select {
	case <-k.compute.Done():
	case <-k.driver.Done():
		// After DeleteVirtualMachine the launcher removes its socket
		// first, so a driver that succeeded ends a moment before the
		// pod; one that gave up while the pod runs says why.
		if code := k.driver.Exit().Code; code != 0 {
			lines, _ := spawn.Tail(k.driverLog, 5)
			k.log.Warn("the driver gave up while its launcher pod runs", "container", k.compute.ID(), "exit", code, "driverLog", strings.Join(lines, " | "))
		}
		<-k.compute.Done()
	}
	computeLog.Close()
	select {
	case <-k.driver.Done():
	case <-time.After(driverAfterPod):
		_, _ = k.driver.Stop(context.Background(), spawn.KillWait)
	}
	close(k.done)
}

func (k *kubevirtPod) ID() string            { return k.compute.ID() }
func (k *kubevirtPod) Ref() launchrt.Ref     { return k.compute.Ref() }
func (k *kubevirtPod) Done() <-chan struct{} { return k.done }

// Signal sends sig to the driver: SIGTERM is virt-handler's stop.
func (k *kubevirtPod) Signal(sig syscall.Signal) error { return k.driver.Signal(sig) }

// Exit is the compute container's exit.
func (k *kubevirtPod) Exit() launchrt.Exit { return exitOnceDone(k.done, k.compute) }

// exitOnceDone is compute's exit once done is closed (a pod of several
// processes has ended), the zero Exit before.
func exitOnceDone(done <-chan struct{}, compute launchrt.Launcher) launchrt.Exit {
	select {
	case <-done:
		return compute.Exit()
	default:
		return launchrt.Exit{}
	}
}

// Stop asks the driver for virt-handler's graceful stop and waits for the
// pod to end; after grace (plus the driver's Kill and Delete) it kills
// the container and the driver.
func (k *kubevirtPod) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	if err := k.driver.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return false, fmt.Errorf("asking the driver to stop: %w", err)
	}
	deadline := time.NewTimer(grace + stopMargin)
	defer deadline.Stop()
	select {
	case <-k.done:
		return false, nil
	case <-deadline.C:
	case <-ctx.Done():
	}
	_, err := k.compute.Stop(context.Background(), 0)
	_, derr := k.driver.Stop(context.Background(), 0)
	<-k.done
	return true, errors.Join(err, derr)
}

// eventSink makes the container's events file and the writer whose lines
// go to it and to the follower that records them.
func (c *container) eventSink(cfg *Config, notify func()) (*spawn.LineWriter, *os.File, error) {
	events, err := os.OpenFile(c.dir.Events(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("creating launcher events file: %w", err)
	}
	follow := launcherapi.NewFollower(func(ev launcherapi.Event) {
		c.record(ev)
		notify()
	}, func(_ []byte, err error) {
		cfg.Logger.Warn("launcher output is not an event", "vmi", c.vmiKey.String(), "err", err)
	})
	// Each line goes to the events file as it comes, and to the follower.
	out := spawn.NewLineWriter(func(line []byte) {
		_, _ = events.Write(append(append([]byte(nil), line...), '\n'))
		follow.Line(line)
	})
	return out, events, nil
}
