package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/podmanrm"
)

// KubeletMode is the node side in which KubeVirt's own virt-handler runs
// on the node and the agent keeps only kubelet's role: it binds and runs
// launcher pods as pods (every container of the pod, in one network
// namespace, with the pod's emptyDirs at kubelet's paths and their mount
// propagation, and devices from the device plugins), reports their
// container statuses and the node's status, and writes nothing to VMIs.
type KubeletMode struct {
	// Command is the command line that runs argv inside the node
	// namespace, where podman runs (clusterlite.Node.Command).
	Command func(argv ...string) []string
	// PodsDir is kubelet's pods folder as virt-handler sees it
	// (--kubelet-pods-dir, and /pods in its container).
	PodsDir string
	// Devices allocates device-plugin resources.
	Devices Devices
	// ImageDir is the node's guest image folder, where a pod's image that
	// podman lacks is imported from (images.json names its folder:
	// kubelet's pull, with no registry here). Compute does not get it:
	// virt-handler bind-mounts the disks and kernel-boot files it reads.
	ImageDir string
	// CacheDir is the compute containers' shared QEMU capability cache.
	CacheDir string
	// Network, when set, gives every pod an eth0 on the pod network and
	// its address as status.podIP (SetupNetwork makes its bridge first);
	// nil leaves the sandbox with lo only.
	Network *PodNetwork

	mu       sync.Mutex
	imported []string // images pull imported, which RemoveImported removes
}

// Devices is kubelet's device manager: the healthy count per resource
// (the node's capacity) and a container's devices.
type Devices interface {
	Healthy() map[string]int
	Allocate(ctx context.Context, resource string, n int) ([]string, error)
}

// devicePrefix is the resource prefix of virt-handler's device plugins.
const devicePrefix = "devices.kubevirt.io/"

// kubeletPod is a launcher pod run as kubelet runs it, as one
// launchrt.Launcher: it ends when its compute container ends, and its
// exit is compute's.
type kubeletPod struct {
	mode    *KubeletMode
	log     *slog.Logger
	names   []string // every container of the pod, the sandbox first
	compute launchrt.Launcher
	// computeName is compute's container name.
	computeName string
	others      []launchrt.Launcher
	// ctrs are the pod's names of the sidecars and containers.
	ctrs []string
	// podIP is the pod's address on the pod network (invalid without one).
	podIP netip.Addr
	uid   types.UID
	// states are the runtime's records of the containers, read at every
	// change the agent sees (observe); notify re-queues the pod then.
	states *podStates
	notify func()
	done   chan struct{}
}

// sandboxName is the pod's sandbox container, in kubelet's form.
func sandboxName(pod *k8sv1.Pod) string {
	return fmt.Sprintf("k8s_POD_%s_%s_%s_0", pod.Name, pod.Namespace, pod.UID)
}

func containerName(pod *k8sv1.Pod, ctr string) string {
	return fmt.Sprintf("k8s_%s_%s_%s_%s_0", ctr, pod.Name, pod.Namespace, pod.UID)
}

// emptyDir is kubelet's folder of a pod's emptyDir volume.
func (m *KubeletMode) emptyDir(pod *k8sv1.Pod, volume string) string {
	return filepath.Join(m.PodsDir, string(pod.UID), "volumes", "kubernetes.io~empty-dir", volume)
}

// run runs argv inside the node namespace to completion.
func (m *KubeletMode) run(ctx context.Context, argv ...string) (string, error) {
	c := m.Command(argv...)
	out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("%s: %w: %s", strings.Join(argv[:min(len(argv), 3)], " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// podman runs podman with args inside the node namespace.
func (m *KubeletMode) podman(ctx context.Context, args ...string) (string, error) {
	return m.run(ctx, append([]string{"podman"}, args...)...)
}

// launchKubelet starts every container of the pod through procs (each a
// foreground `podman run` client inside the node namespace); progress
// reports the pod while its init containers run.
func (c *container) launchKubelet(ctx context.Context, cfg *Config, procs Runtime, notify func(), progress func(netip.Addr)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil || c.exited {
		return nil
	}
	if err := os.MkdirAll(string(c.dir), 0o700); err != nil {
		return fmt.Errorf("creating the pod's log folder: %w", err)
	}
	out, events, err := c.eventSink(cfg, notify)
	if err != nil {
		return err
	}
	k := &kubeletPod{mode: cfg.Kubelet, log: cfg.Logger, uid: c.pod.UID, states: c.states, notify: notify, done: make(chan struct{})}
	err = k.start(ctx, cfg, procs, c.pod, string(c.dir), progress)
	if err != nil {
		events.Close()
		return err
	}
	// running stays false for a compute that ended before podman showed
	// the pod's containers running: the pod then goes from Pending to
	// Failed, never Running, as under kubelet.
	if k.podIP.IsValid() {
		c.podIP = k.podIP.String()
	}
	c.run, c.running = k, k.waitRunning(ctx)
	go c.watch(cfg.Logger, out, events, notify)
	return nil
}

// prepare makes the pod's emptyDirs and makes sure podman has the images
// of its containers.
func (m *KubeletMode) prepare(ctx context.Context, pod *k8sv1.Pod) error {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			if err := os.MkdirAll(m.emptyDir(pod, v.Name), 0o777); err != nil {
				return fmt.Errorf("creating emptyDir %s: %w", v.Name, err)
			}
			_ = os.Chmod(m.emptyDir(pod, v.Name), 0o777)
			if err := setVolumeOwnership(m.emptyDir(pod, v.Name), fsGroupOf(pod)); err != nil {
				return fmt.Errorf("emptyDir %s: %w", v.Name, err)
			}
		}
	}
	if c := computeOf(pod); c != nil {
		if err := prepareUserCacheDir(m.CacheDir, runAsOf(pod, c)); err != nil {
			return err
		}
	}
	images := map[string]bool{}
	for _, ctr := range append(append([]k8sv1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if !images[ctr.Image] {
			if err := m.pull(ctx, ctr.Image); err != nil {
				return err
			}
			images[ctr.Image] = true
		}
	}
	return nil
}

// start makes the pod's emptyDirs and sandbox, runs its init containers
// in order, and starts its sidecars and containers; progress reports the
// pod once its sandbox is up and after each init container.
func (k *kubeletPod) start(ctx context.Context, cfg *Config, procs Runtime, pod *k8sv1.Pod, logDir string, progress func(netip.Addr)) (err error) {
	m := cfg.Kubelet
	begin := time.Now()
	defer func() {
		if err != nil {
			k.removeAll()
		}
	}()
	if err := m.prepare(ctx, pod); err != nil {
		return err
	}
	compute, _, err := computeResources(pod)
	if err != nil {
		return err
	}
	sandbox := sandboxName(pod)
	k.names = append(k.names, sandbox)
	if _, err := m.run(ctx, append([]string{"podman", "run", "-d", "--rm", "--pull", "never", "--runtime", "runc", "--init",
		"--network", "none", "--hostname", podHostname(pod), "--name", sandbox}, append(podLabels(pod, "POD", cfg.NodeName), "--entrypoint", "sleep", compute, "infinity")...)...); err != nil {
		return fmt.Errorf("the pod's sandbox: %w", err)
	}
	pid, err := m.run(ctx, "podman", "inspect", "--format", "{{.State.Pid}}", sandbox)
	if err != nil {
		return fmt.Errorf("the pod's sandbox: %w", err)
	}
	netns := "/proc/" + pid + "/ns/net" // the node namespace's /proc
	if err := k.attachNetwork(ctx, pod, pid); err != nil {
		return err
	}
	progress(k.podIP)
	if err := k.runInits(ctx, cfg, pod, netns, progress); err != nil {
		return err
	}
	if st, err := m.run(ctx, "podman", "inspect", "--format", "{{.State.Status}} {{.State.Pid}} {{.State.ExitCode}}", sandbox); err != nil || !strings.HasPrefix(st, "running") {
		return fmt.Errorf("the pod's sandbox ended during the init containers: %s %v", st, err)
	}
	var later []k8sv1.Container
	for _, ctr := range pod.Spec.InitContainers {
		if isSidecar(ctr) {
			later = append(later, ctr)
		}
	}
	for _, ctr := range append(later, pod.Spec.Containers...) {
		argv, err := m.runArgs(ctx, cfg.NodeName, pod, ctr, netns, k.podIP)
		if err != nil {
			return err
		}
		k.names = append(k.names, containerName(pod, ctr.Name))
		k.ctrs = append(k.ctrs, ctr.Name)
		argv = m.Command(argv...) // inside the node namespace, never the host's podman
		l, err := procs.Start(ctx, launchrt.Spec{Path: argv[0], Args: argv[1:], Dir: logDir,
			StderrFile: filepath.Join(logDir, ctr.Name+".log"), StdoutFile: filepath.Join(logDir, ctr.Name+".log"), Truncate: true})
		if err != nil {
			return fmt.Errorf("container %s: %w", ctr.Name, err)
		}
		if ctr.Name == computeContainer {
			k.compute, k.computeName = l, containerName(pod, ctr.Name)
		} else {
			k.others = append(k.others, l)
		}
	}
	if k.compute == nil {
		return fmt.Errorf("pod %s/%s has no %q container", pod.Namespace, pod.Name, computeContainer)
	}
	cfg.Logger.Info("launcher pod started as a pod", "pod", pod.Namespace+"/"+pod.Name, "containers", k.names[1:], "after", time.Since(begin).Round(time.Millisecond))
	go k.watch()
	return nil
}

// runInits runs the pod's init containers (not its sidecars) one after
// the other to completion; after each, podman's record of it is read and
// the pod reported, so that its status shows the init container's end.
func (k *kubeletPod) runInits(ctx context.Context, cfg *Config, pod *k8sv1.Pod, netns string, progress func(netip.Addr)) error {
	m := cfg.Kubelet
	for _, ctr := range pod.Spec.InitContainers {
		if isSidecar(ctr) {
			continue // started with the containers
		}
		argv, err := m.runArgs(ctx, cfg.NodeName, pod, ctr, netns, k.podIP)
		if err != nil {
			return err
		}
		k.names = append(k.names, containerName(pod, ctr.Name))
		ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err = m.run(ictx, argv...)
		cancel()
		k.observe(ctx)
		if err != nil {
			return fmt.Errorf("init container %s: %w", ctr.Name, err)
		}
		progress(k.podIP)
	}
	return nil
}

// attachNetwork is kubelet's CNI ADD, when there is a pod network: the
// sandbox's eth0 (its node-namespace PID) before any container starts.
func (k *kubeletPod) attachNetwork(ctx context.Context, pod *k8sv1.Pod, pid string) error {
	if k.mode.Network == nil {
		return nil
	}
	begin := time.Now()
	a, err := k.mode.Network.attach(ctx, k.mode.run, pod.UID, pid)
	if err != nil {
		return err
	}
	k.podIP = a
	k.log.Info("pod network attached", "pod", pod.Namespace+"/"+pod.Name, "podIP", a, "after", time.Since(begin).Round(time.Millisecond))
	return nil
}

// podLabels are the podman flags every container of the pod gets: the
// CRI labels, the node's, and the rlimits these machines need.
func podLabels(pod *k8sv1.Pod, ctr, node string) []string {
	return []string{"--label", LabelPodUID + "=" + string(pod.UID), "--label", LabelPodName + "=" + pod.Name,
		"--label", LabelPodNamespace + "=" + pod.Namespace, "--label", LabelContainerName + "=" + ctr,
		"--label", LabelNode + "=" + node, "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"}
}

// podHostname is the hostname kubelet gives every container of the pod:
// spec.hostname, else the pod's name, at most 63 characters
// (KubeVirt sets spec.hostname of a launcher pod to the VMI's).
func podHostname(pod *k8sv1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// runArgs is the `podman run` command line of one container of the pod,
// in the pod's network namespace. As under kubelet, the container has the
// pod's hostname, and its /etc/hosts maps it to the pod's address (podIP,
// when the pod has one): a lookup of the own hostname (libvirt makes one
// at every domain start) is answered there, not by a DNS server that the
// pod network cannot reach, which costs the DNS timeouts (10 s).
func (m *KubeletMode) runArgs(ctx context.Context, node string, pod *k8sv1.Pod, ctr k8sv1.Container, netns string, podIP netip.Addr) ([]string, error) {
	args := []string{"podman", "run", "--pull", "never", "--runtime", "runc", "--name", containerName(pod, ctr.Name),
		"--network", "ns:" + netns, "--hostname", podHostname(pod)}
	if podIP.IsValid() {
		args = append(args, "--add-host", podHostname(pod)+":"+podIP.String())
	}
	args = append(args, podLabels(pod, ctr.Name, node)...)
	if sc := ctr.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		args = append(args, "--privileged")
	}
	runAs := runAsOf(pod, &ctr)
	args = append(args, podmanRunAs(runAs)...)
	emptyDirs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	for _, vm := range ctr.VolumeMounts {
		if !emptyDirs[vm.Name] {
			continue // only emptyDirs are provided on this node
		}
		v := m.emptyDir(pod, vm.Name) + ":" + vm.MountPath
		opts := []string{}
		if vm.ReadOnly {
			opts = append(opts, "ro")
		}
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case k8sv1.MountPropagationHostToContainer:
				opts = append(opts, "rslave")
			case k8sv1.MountPropagationBidirectional:
				opts = append(opts, "rshared")
			}
		}
		if len(opts) > 0 {
			v += ":" + strings.Join(opts, ",")
		}
		args = append(args, "-v", v)
	}
	if ctr.Name == computeContainer {
		// No image folder: compute reads the pod's containerDisks and
		// kernel-boot files where virt-handler bind-mounts them
		// (container-disks/), as KubeVirt's launcher does, so a missing
		// mount fails the start instead of falling back unseen.
		if m.CacheDir != "" {
			args = append(args, "-v", userCacheDir(m.CacheDir, runAs)+":"+launcherapi.DefaultCacheDir)
		}
	}
	for _, e := range ctr.Env {
		if v, ok := envValue(pod, e); ok {
			args = append(args, "-e", e.Name+"="+v)
		}
	}
	for name, q := range ctr.Resources.Limits {
		if !strings.HasPrefix(string(name), devicePrefix) || q.Value() <= 0 {
			continue
		}
		devs, err := m.Devices.Allocate(ctx, string(name), int(q.Value()))
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", ctr.Name, err)
		}
		for _, d := range devs {
			args = append(args, "--device", d)
		}
	}
	if q, ok := ctr.Resources.Limits[k8sv1.ResourceMemory]; ok && q.Value() > 0 {
		args = append(args, "--memory", strconv.FormatInt(q.Value(), 10), "--memory-swap", strconv.FormatInt(q.Value(), 10))
	}
	if q, ok := ctr.Resources.Limits[k8sv1.ResourceCPU]; ok && q.MilliValue() > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', -1, 64))
	}
	if ctr.WorkingDir != "" {
		args = append(args, "--workdir", ctr.WorkingDir)
	}
	cmd := append(append([]string(nil), ctr.Command...), ctr.Args...)
	if len(ctr.Command) > 0 {
		args = append(args, "--entrypoint", ctr.Command[0], ctr.Image)
		return append(args, cmd[1:]...), nil
	}
	return append(append(args, ctr.Image), ctr.Args...), nil
}

// envValue is an environment variable's value as kubelet resolves it:
// a literal, or the pod's name, namespace, UID or node from the downward
// API; other sources are not provided here.
func envValue(pod *k8sv1.Pod, e k8sv1.EnvVar) (string, bool) {
	if e.ValueFrom == nil {
		return e.Value, true
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		switch f.FieldPath {
		case "metadata.name":
			return pod.Name, true
		case "metadata.namespace":
			return pod.Namespace, true
		case "metadata.uid":
			return string(pod.UID), true
		case "spec.nodeName":
			return pod.Spec.NodeName, true
		}
	}
	return "", false
}

// pull makes sure podman has image: an image missing from its store is
// imported from the image folder named for it in ImageDir/images.json.
func (m *KubeletMode) pull(ctx context.Context, image string) error {
	if _, err := m.run(ctx, "podman", "image", "exists", image); err == nil {
		return nil
	}
	folder, err := imageFolder(m.ImageDir, image)
	if err != nil {
		return err
	}
	sh := fmt.Sprintf("tar -C %q -c . | podman import - %q", folder, image)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.run(ctx, "podman", "image", "exists", image); err == nil {
		return nil // imported for another pod meanwhile
	}
	if _, err := m.run(ctx, "sh", "-c", sh); err != nil {
		return fmt.Errorf("importing image %s from %s: %w", image, folder, err)
	}
	m.imported = append(m.imported, image)
	return nil
}

// RemoveImported removes the images pull imported into podman's store,
// so that the node leaves the store as it found it.
func (m *KubeletMode) RemoveImported(ctx context.Context) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.imported) == 0 {
		return nil
	}
	_, err := m.run(ctx, append([]string{"podman", "rmi", "--force"}, m.imported...)...)
	m.imported = nil
	return err
}

// imageFolder is the folder of dir that dir/images.json names for image.
func imageFolder(dir, image string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return "", fmt.Errorf("image %s is not in podman's store, and the image folder has no index: %w", image, err)
	}
	var index map[string]string
	if err := json.Unmarshal(data, &index); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, "images.json"), err)
	}
	name, ok := index[image]
	if !ok || name == "" || strings.HasSuffix(name, ".tar") || strings.Contains(name, ":") {
		return "", fmt.Errorf("image %s: neither in podman's store nor a folder of %s/images.json", image, dir)
	}
	if !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	return name, nil
}

// observe reads podman's record of every container of the pod (one
// `podman container inspect`) into the pod's states; a failed read
// leaves them as they were.
func (k *kubeletPod) observe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	recs, err := k.mode.inspect(ctx, k.names)
	if err != nil {
		k.log.Debug("reading the pod's containers from podman", "err", err)
		return
	}
	k.states.merge(recs, "")
}

// watch follows the pod's containers through their `podman run`
// clients, which end with their containers: at the end of any but compute
// it reads podman's records and re-queues the pod (kubelet's PLEG, driven
// by the runtime's own end of a container rather than a relist); at
// compute's end it reads them once more, keeps them (the pod ends: its
// status is final), then removes the pod's other containers and its
// sandbox.
func (k *kubeletPod) watch() {
	for _, o := range k.others {
		go func() {
			select {
			case <-o.Done():
			case <-k.compute.Done():
				return
			}
			k.observe(context.Background())
			k.notify()
		}()
	}
	<-k.compute.Done()
	k.observe(context.Background())
	k.states.freeze()
	k.removeAll()
	for _, o := range k.others {
		<-o.Done()
	}
	close(k.done)
}

// waitRunning waits until podman shows the sidecars and the containers
// running, as kubelet reports a container running from its runtime's
// state rather than from its start request (one `podman container
// inspect` of the pod every 100 ms, only while it starts). It is false
// when compute ended first (a launcher that fails at once, such as
// KubeVirt's fail-fast one); after a minute it gives up waiting and is
// true.
func (k *kubeletPod) waitRunning(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		k.observe(ctx)
		states := k.states.all()
		all := true
		for _, name := range k.ctrs {
			all = all && states[name].Status == "running"
		}
		select {
		case <-k.compute.Done():
			return false
		default:
		}
		if all {
			return true
		}
		select {
		case <-k.compute.Done():
			return false
		case <-ctx.Done():
			return true
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeAll removes every container of the pod, from inside the node
// namespace.
func (k *kubeletPod) removeAll() {
	if len(k.names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := podmanrm.Remove(ctx, k.mode.podman, k.names...); err != nil {
		k.log.Error("removing the pod's containers", "containers", k.names, "err", err)
	}
	if k.mode.Network != nil {
		// kubelet's CNI DEL, after the sandbox (whose namespace takes
		// the veth pair with it): the address is free again.
		if err := k.mode.Network.detach(ctx, k.mode.run, k.uid); err != nil {
			k.log.Error("removing the pod's network", "err", err)
		}
	}
}

// SetupNetwork makes the pod network's bridge, when there is a Network.
func (m *KubeletMode) SetupNetwork(ctx context.Context) error {
	if m == nil || m.Network == nil {
		return nil
	}
	return m.Network.setup(ctx, m.run)
}

// RemoveNetwork removes the pod network's bridge and any pod veth left on
// it, when there is a Network; the node's containers are removed first.
func (m *KubeletMode) RemoveNetwork(ctx context.Context) error {
	if m == nil || m.Network == nil {
		return nil
	}
	return m.Network.teardown(ctx, m.run)
}

func (k *kubeletPod) ID() string            { return k.compute.ID() }
func (k *kubeletPod) Ref() launchrt.Ref     { return k.compute.Ref() }
func (k *kubeletPod) Done() <-chan struct{} { return k.done }

// Signal sends sig to the compute container.
func (k *kubeletPod) Signal(sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := k.mode.run(ctx, "podman", "kill", "--signal", strconv.Itoa(int(sig)), k.computeName)
	return err
}

// Exit is the compute container's.
func (k *kubeletPod) Exit() launchrt.Exit { return exitOnceDone(k.done, k.compute) }

// Stop is kubelet's pod stop: SIGTERM to every container, SIGKILL (the
// containers' removal) once grace has passed.
func (k *kubeletPod) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := k.mode.run(tctx, append([]string{"podman", "kill", "--signal", "TERM"}, k.names[1:]...)...)
	cancel()
	if err != nil {
		k.log.Debug("podman kill TERM", "err", err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-k.done:
		return false, nil
	case <-t.C:
	case <-ctx.Done():
	}
	k.removeAll()
	select {
	case <-k.done:
		return true, nil
	case <-time.After(time.Minute):
		return true, errors.New("the pod's containers did not end a minute after their removal")
	}
}
