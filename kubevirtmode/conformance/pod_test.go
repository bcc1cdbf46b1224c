package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"

	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/kubevirtmode/handlerside"
)

// The emptyDirs of a KubeVirt v1.6.0 launcher pod (pkg/virt-controller/
// services/rendervolumes.go) and where the compute container mounts them.
var podVolumes = []struct{ name, mount string }{
	{"private", "/var/run/kubevirt-private"},
	{"public", "/var/run/kubevirt"},
	{"sockets", "/var/run/kubevirt/sockets"},
	{"libvirt-runtime", "/var/run/libvirt"},
	{"ephemeral-disks", "/var/run/kubevirt-ephemeral-disks"},
	{"container-disks", "/var/run/kubevirt/container-disks"},
	{"hotplug-disks", "/var/run/kubevirt/hotplug-disks"},
}

// podSpec says how to run one pod.
type podSpec struct {
	direct      bool              // the binary on the host instead of the image in podman
	kernelArgs  string            // the test guest's kernel arguments ("" keeps it up)
	annotations map[string]string // the VMI's annotations (faults)
	extra       []string          // compute flags after the rendered ones
	qemuTimeout string            // --qemu-timeout, default 240s
	podman      []string          // extra podman run flags (limits)
}

// pod is one launcher pod and the virt-handler side that watches it.
type pod struct {
	vmi     *v1.VirtualMachineInstance
	root    string              // host folder of the pod's volumes
	public  string              // host path of /var/run/kubevirt
	handler string              // virt-handler's own folder (its notify server socket)
	notify  *handlerside.Notify // virt-handler's notify server and the pod's pipe to it
	events  chan watch.Event    // notify.Events
	cmd     *exec.Cmd
	cid     string
	out     *syncBuffer
	exited  chan struct{}
	code    int
	client  cmdclient.LauncherClient
	seen    []watch.Event // every domain event received, in order
}

// syncBuffer is the pod's log, written by the process and read by specs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testVMI is the suite's VMI: the test guest of the other suites.
func testVMI(kernelArgs string, annotations map[string]string) *v1.VirtualMachineInstance {
	name := "kv-" + string(uuid.NewUUID())[:8]
	vm := testguest.VM(name, "", annotations, kernelArgs)
	vmi := &v1.VirtualMachineInstance{ObjectMeta: vm.Spec.Template.ObjectMeta, Spec: vm.Spec.Template.Spec}
	vmi.APIVersion, vmi.Kind = v1.GroupVersion.String(), "VirtualMachineInstance"
	vmi.Name, vmi.Namespace, vmi.UID = name, vm.Namespace, uuid.NewUUID()
	return vmi
}

// computeArgs is the compute container's command line as virt-controller
// v1.6.0 renders it (template.go), without the program name.
func computeArgs(vmi *v1.VirtualMachineInstance, qemuTimeout string, extra []string) []string {
	args := []string{
		"--qemu-timeout", qemuTimeout,
		"--name", vmi.Name,
		"--uid", string(vmi.UID),
		"--namespace", vmi.Namespace,
		"--kubevirt-share-dir", "/var/run/kubevirt",
		"--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
		"--container-disk-dir", "/var/run/kubevirt/container-disks",
		"--grace-period-seconds", strconv.Itoa(int(*vmi.Spec.TerminationGracePeriodSeconds) + 15),
		"--hook-sidecars", "0",
		"--ovmf-path", "/usr/share/OVMF",
		"--disk-memory-limit", "2097152000",
		"--allow-emulation",
	}
	return append(args, extra...)
}

// startPod starts the pod, its notify server and pipe, waits for the
// launcher socket and connects virt-handler's cmd client to it.
func startPod(spec podSpec) *pod {
	if spec.qemuTimeout == "" {
		spec.qemuTimeout = "240s"
	}
	root, err := os.MkdirTemp("", "cl-kvmode-pod-")
	Expect(err).NotTo(HaveOccurred())
	p := &pod{vmi: testVMI(spec.kernelArgs, spec.annotations), root: root, handler: filepath.Join(root, "handler"),
		out: &syncBuffer{}, exited: make(chan struct{})}
	DeferCleanup(p.cleanup)
	for _, v := range podVolumes {
		Expect(os.MkdirAll(filepath.Join(root, "volumes", v.name), 0o755)).To(Succeed())
		if !spec.direct {
			emptyDirOfNonRootPod(filepath.Join(root, "volumes", v.name))
		}
	}
	Expect(os.MkdirAll(p.handler, 0o755)).To(Succeed())
	p.public = filepath.Join(root, "volumes", "public")
	if !spec.direct {
		// virt-controller's mark of a non-root VMI, which virt-handler
		// (here handlerside) hands the notify pipe over by.
		p.vmi.Status.RuntimeUser = nonRootUID
	}
	p.startHandler()

	args := computeArgs(p.vmi, spec.qemuTimeout, spec.extra)
	if spec.direct {
		// The binary on the host: the public and sockets volumes are one
		// folder tree, our launcher and the images are the host's.
		Expect(os.MkdirAll(filepath.Join(p.public, "sockets"), 0o755)).To(Succeed())
		args = replaceFlag(args, "--kubevirt-share-dir", p.public)
		args = replaceFlag(args, "--ephemeral-disk-dir", filepath.Join(root, "volumes", "ephemeral-disks"))
		args = append(args, "--crashloop-launcher", built.Launcher(), "--crashloop-image-dir", built.ImageDir())
		p.cmd = exec.Command(monitorBin(), args...)
	} else {
		p.cmd = exec.Command("podman", p.podmanArgs(args, spec.podman)...)
		// conmon writes a file "oom" into podman's working folder.
		p.cmd.Dir = root
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	Expect(p.cmd.Start()).To(Succeed())
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	return p
}

// nonRootUID is KubeVirt's non-root launcher user and group, qemu (107):
// virt-controller v1.6.0 renders a launcher pod without the Root feature
// gate with runAsUser, runAsGroup and fsGroup 107 (template.go
// computePodSecurityContext) and the XDG folders of nonRootEnv.
const nonRootUID = 107

// nonRootEnv is the compute container's environment virt-controller
// renders for a non-root launcher (rendercontainer.go).
var nonRootEnv = []string{"XDG_CACHE_HOME=/var/run/kubevirt-private", "XDG_CONFIG_HOME=/var/run/kubevirt-private", "XDG_RUNTIME_DIR=/var/run"}

// emptyDirOfNonRootPod leaves dir as kubelet leaves an emptyDir of a pod
// with fsGroup 107: mode 0777, group 107, setgid.
func emptyDirOfNonRootPod(dir string) {
	Expect(os.Chown(dir, -1, nonRootUID)).To(Succeed())
	Expect(os.Chmod(dir, os.ModeSetgid|0o777)).To(Succeed())
}

// podmanArgs is `podman run` of the compute container: runc (crun refuses
// this host's hybrid cgroups), explicit rlimits (no CAP_SYS_RESOURCE), no
// network (the VMI has no interface), the monitor as PID 1 (no --init: a
// pod's compute container has none), as a non-root launcher pod runs it
// (user 107:107, fsGroup 107 as a supplemental group, virt-controller's
// environment), the emptyDirs as volumes, the guest
// images read-only and the suite's capability cache, handed to 107.
func (p *pod) podmanArgs(compute, extra []string) []string {
	p.cid = filepath.Join(p.root, "cid")
	uid := strconv.Itoa(nonRootUID)
	args := []string{"run", "--rm", "--runtime", "runc", "--network", "none", "--cidfile", p.cid,
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
		"--user", uid + ":" + uid, "--group-add", uid,
		"-v", built.ImageDir() + ":/usr/share/crashloop/images:ro",
		"-v", capsCache + ":/var/cache/crashloop/qemu-capabilities:U"}
	for _, e := range nonRootEnv {
		args = append(args, "-e", e)
	}
	for _, v := range podVolumes {
		args = append(args, "-v", filepath.Join(p.root, "volumes", v.name)+":"+v.mount)
	}
	args = append(args, extra...)
	args = append(args, "--entrypoint", "/usr/bin/virt-launcher-monitor", image())
	return append(args, compute...)
}

func replaceFlag(args []string, flag, value string) []string {
	for i := range args {
		if args[i] == flag {
			args[i+1] = value
		}
	}
	return args
}

// startHandler runs virt-handler's notify server in the handler folder
// and, as virt-handler's startDomainNotifyPipe does, a pipe from the pod's
// domain-notify-pipe.sock to it.
func (p *pod) startHandler() {
	var err error
	p.notify, err = handlerside.StartNotify(p.handler, p.public, p.vmi)
	Expect(err).NotTo(HaveOccurred())
	p.events = p.notify.Events
}

// stopHandler stops the notify server (virt-handler going away).
func (p *pod) stopHandler() {
	Expect(p.notify.Stop(15 * time.Second)).To(Succeed())
}

// socket is the launcher socket on the host: in the pod's sockets
// volume, where virt-handler finds it (cmdclient.SocketFilePathOnHost);
// for the binary run directly, sockets/ of the share folder.
func (p *pod) socket() string {
	if p.cid == "" {
		return filepath.Join(p.public, "sockets", "launcher-sock")
	}
	return filepath.Join(p.root, "volumes", "sockets", "launcher-sock")
}

// connect waits for the ready socket and makes virt-handler's client.
func (p *pod) connect() cmdclient.LauncherClient {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := handlerside.Connect(ctx, p.socket(), p.exited)
	Expect(err).NotTo(HaveOccurred(), "pod log:\n%s", p.out)
	p.client = c
	return c
}

// nextEvent is the next domain event the notify server received.
func (p *pod) nextEvent(timeout time.Duration) watch.Event {
	var ev watch.Event
	Eventually(p.events).WithTimeout(timeout).Should(Receive(&ev), "no domain event within %v; pod log:\n%s", timeout, p.out)
	p.seen = append(p.seen, ev)
	return ev
}

// waitState reads domain events until one has state and reason.
func (p *pod) waitState(state api.LifeCycle, reason api.StateChangeReason, timeout time.Duration) *api.Domain {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		Expect(left).To(BeNumerically(">", 0), "no domain event %s/%s within %v; seen: %s; pod log:\n%s", state, reason, timeout, describe(p.seen), p.out)
		ev := p.nextEvent(left)
		if d, ok := ev.Object.(*api.Domain); ok && d.Status.Status == state && d.Status.Reason == reason {
			return d
		}
	}
}

// describe renders events as "Added Shutoff/Unknown, Modified Running/Unknown, ...".
func describe(evs []watch.Event) string {
	var parts []string
	for _, ev := range evs {
		if d, ok := ev.Object.(*api.Domain); ok {
			del := ""
			if d.DeletionTimestamp != nil {
				del = "+deleted"
			}
			parts = append(parts, fmt.Sprintf("%s %s/%s%s", ev.Type, d.Status.Status, d.Status.Reason, del))
		}
	}
	return strings.Join(parts, ", ")
}

// waitExit waits for the pod to end and returns its exit code.
func (p *pod) waitExit(timeout time.Duration) int {
	Eventually(p.exited).WithTimeout(timeout).Should(BeClosed(), "the pod did not end within %v; log:\n%s", timeout, p.out)
	return p.code
}

// k8sEvents are the Kubernetes events virt-handler's recorder got.
func (p *pod) k8sEvents() []string {
	var out []string
	for {
		select {
		case e := <-p.notify.Recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (p *pod) cleanup() {
	if p.client != nil {
		p.client.Close()
	}
	select {
	case <-p.exited:
	default:
		if p.cid != "" {
			if id, err := os.ReadFile(p.cid); err == nil {
				_ = exec.Command("podman", "rm", "--force", "--time", "0", strings.TrimSpace(string(id))).Run()
			}
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	p.stopHandler()
	if CurrentSpecReport().Failed() {
		GinkgoWriter.Printf("pod log:\n%s\n", p.out)
	}
	Expect(os.RemoveAll(p.root)).To(Succeed())
}

// podmanKill sends a signal to the pod's container (the kubelet's stop).
func podmanKill(p *pod, sig string) error {
	var id []byte
	Eventually(func() error {
		var err error
		id, err = os.ReadFile(p.cid)
		return err
	}).WithTimeout(30 * time.Second).Should(Succeed())
	out, err := exec.Command("podman", "kill", "--signal", sig, strings.TrimSpace(string(id))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman kill: %v: %s", err, out)
	}
	return nil
}

// restartHandler starts a new notify server and pipe (virt-handler back).
func (p *pod) restartHandler() {
	_ = os.Remove(filepath.Join(p.public, handlerside.NotifyPipe))
	p.startHandler()
}

// qemuPIDs are the host's QEMU processes of the pod's domain.
func (p *pod) qemuPIDs() []string {
	want := "guest=" + p.vmi.Namespace + "_" + p.vmi.Name
	var pids []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(cmdline, "qemu-system") && strings.Contains(cmdline, want) {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// processUsers lists every process of the pod's container (those in the
// PID namespace of its first process: the monitor, our launcher, QEMU)
// with its real, effective, saved and filesystem user IDs from
// /proc/PID/status, as "name(pid)" → "uid uid uid uid".
func (p *pod) processUsers() map[string]string {
	id, err := os.ReadFile(p.cid)
	Expect(err).NotTo(HaveOccurred(), "the pod's container ID")
	pid, err := exec.Command("podman", "inspect", "--format", "{{.State.Pid}}", strings.TrimSpace(string(id))).Output()
	Expect(err).NotTo(HaveOccurred())
	ns, err := os.Readlink("/proc/" + strings.TrimSpace(string(pid)) + "/ns/pid")
	Expect(err).NotTo(HaveOccurred())
	users := map[string]string{}
	files, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, f := range files {
		if theirs, err := os.Readlink(filepath.Join(filepath.Dir(f), "ns", "pid")); err != nil || theirs != ns {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var name, uid string
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				uid = strings.Join(strings.Fields(v), " ")
			}
		}
		users[fmt.Sprintf("%s(%s)", name, filepath.Base(filepath.Dir(f)))] = uid
	}
	return users
}
