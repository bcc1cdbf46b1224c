package monitor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// childGrace is the grace period our launcher gets: the monitor, not the
// child, decides when a graceful stop ends in a destroy (virt-handler's
// Kill, or the pod's grace period on SIGTERM), so the child's own limit
// only has to be longer than any of those.
const childGrace = 24 * time.Hour

// child is one run of our launcher pipeline on the VMI.
type child struct {
	cmd    *exec.Cmd
	tail   *lastLine              // the launcher's last stderr line, for a refusal's message
	events chan launcherapi.Event // closed at the end of its stdout
	exited chan syscall.WaitStatus
}

// manifestFor is the VMI our launcher reads: metadata (name, namespace,
// UID, labels, annotations) and spec, without status and server fields.
// KubeVirt's fail-fast annotation is left out: upstream the launcher never
// reads it (virt-controller turns it into --simulate-crash), so neither
// does our child.
func manifestFor(vmi *v1.VirtualMachineInstance) ([]byte, error) {
	// A struct of its own: VirtualMachineInstance would add "status": {}.
	out := struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              v1.VirtualMachineInstanceSpec `json:"spec"`
	}{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: vmi.Name, Namespace: vmi.Namespace, UID: vmi.UID,
			Labels: vmi.Labels, Annotations: map[string]string{}},
		Spec: vmi.Spec,
	}
	for k, v := range vmi.Annotations {
		if k != faults.FailFastAnnotation {
			out.Annotations[k] = v
		}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding VMI %s/%s for the launcher: %w", vmi.Namespace, vmi.Name, err)
	}
	return data, nil
}

// launcherArgs is our launcher's command line for one start; podNetwork
// is its --pod-network (the Monitor's podNetwork()), seed its --seed: the pod's, which
// the monitor decides its own faults with too (socketfault.go).
func (f Flags) launcherArgs(manifest, consoleLog, podNetwork string, seed launcherapi.Seed) []string {
	grace := childGrace
	a := launcherapi.Args{
		Manifest: manifest,
		Accel:    launcherapi.AccelKVM,
		ImageDir: f.ImageDir,
		// Where virt-handler bind-mounts the pod's containerDisks and
		// kernel-boot files, read there as KubeVirt's launcher reads them.
		ContainerDiskDir: f.ContainerDiskDir,
		ConsoleLog:       consoleLog,
		StartTimeout:     launcherapi.FixedStartTimeout(f.QemuTimeout),
		GracePeriod:      &grace,
		EventFormat:      launcherapi.FormatJSON,
		LogLevel:         f.LogLevel,
		HookSidecars:     f.HookSidecars,
		PodNetwork:       podNetwork,
		Seed:             seed,
		// The cluster's admission (virt-api, with the KubeVirt CR's
		// gates) already took this VMI: the launcher's gates stand open.
		FeatureGates: launcherapi.FeatureGateNames(),
	}
	if f.AllowEmulation {
		a.Accel = launcherapi.AccelAuto
	}
	return a.Build()
}

// podTap is the tap device virt-handler's phase-1 network setup makes in
// the pod's network namespace for the pod network's masquerade or bridge
// binding (KubeVirt's GenerateTapDeviceName for eth0).
const podTap = "tap0"

// podNetwork is our launcher's --pod-network: kubevirt-tap once tap0
// exists in this network namespace (virt-handler sets the pod network up
// before its first SyncVirtualMachine, as for KubeVirt's launcher), else
// QEMU's user-mode network, as where nothing set a pod network up (the
// conformance suite, a VMI without one). The Monitor's default
// podNetwork; unit tests give theirs.
func podNetworkOfThisNamespace() string {
	if _, err := net.InterfaceByName(podTap); err == nil {
		return launcherapi.PodNetworkKubeVirtTap
	}
	return launcherapi.PodNetworkUser
}

// startChild writes the VMI into dir and starts our launcher on it, with
// podNetwork as its --pod-network. Its
// stdout is read line by line into events; its exit status comes from the
// monitor's reaper (reap), not from exec.Cmd.Wait, because the monitor is
// PID 1 of the compute container and reaps every orphan too.
func startChild(f Flags, seed launcherapi.Seed, podNetwork string, vmi *v1.VirtualMachineInstance, dir string, stderr io.Writer) (*child, error) {
	data, err := manifestFor(vmi)
	if err != nil {
		return nil, err
	}
	// Owner-only: the launcher, our child, is the one reader of the VMI.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the launch folder: %w", err)
	}
	ld := launcherapi.Dir(dir)
	if err := os.WriteFile(ld.Manifest(), data, 0o600); err != nil {
		return nil, fmt.Errorf("writing the VMI for the launcher: %w", err)
	}
	cmd := exec.Command(f.Launcher, f.launcherArgs(ld.Manifest(), filepath.Join(dir, launcherapi.ConsoleFile), podNetwork, seed)...)
	tail := &lastLine{}
	cmd.Stderr = io.MultiWriter(stderr, tail)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("launcher stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the launcher %s: %w", f.Launcher, err)
	}
	c := &child{cmd: cmd, tail: tail, events: make(chan launcherapi.Event, 16), exited: make(chan syscall.WaitStatus, 1)}
	go c.read(out)
	return c, nil
}

// read parses the launcher's event lines; lines that are not events are
// skipped.
func (c *child) read(out io.ReadCloser) {
	defer close(c.events)
	defer out.Close()
	follow := launcherapi.NewFollower(func(ev launcherapi.Event) { c.events <- ev }, nil)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		follow.Line(sc.Bytes())
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(c.pid(), sig)
}

// lastLine keeps the last complete non-empty line written to it.
type lastLine struct {
	mu      sync.Mutex
	partial []byte
	last    string
}

// Write implements io.Writer.
func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(l.partial[:i])); line != "" {
			l.last = line
		}
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 64*1024 {
		l.partial = l.partial[len(l.partial)-64*1024:]
	}
	return len(p), nil
}

// String is the last line.
func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
