package image_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/uuid"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/pkg/converter"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/memcg"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// nodeKVM reports whether the node has KVM that runs ordinary guests (the
// launcher's own rule), so that the container gets /dev/kvm.
func nodeKVM() bool {
	host, err := converter.ReadHostVirt()
	Expect(err).NotTo(HaveOccurred())
	accel, _ := converter.ChooseAccel(converter.AccelAuto, host)
	return accel == converter.AccelKVM
}

// Container is one `podman run` of the launcher image on one VMI.
type Container struct {
	// Name is the VMI's name; Domain its libvirt domain (namespace_name).
	Name, Domain string
	// ID is the container's ID, from podman's --cidfile.
	ID string
	// Dir holds the manifest, the cidfile and the mounted log folder.
	Dir    string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{} // closed when `podman run` has returned
	exit   int           // its exit code, once done is closed

	mu     sync.Mutex
	events []launcherapi.Event
}

// podman runs a podman command and returns its combined output.
func podman(args ...string) (string, error) {
	out, err := exec.Command("podman", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// runArgs is the podman command line of the README: runc (crun refuses
// this host's hybrid cgroups), explicit rlimits (the sandbox lacks
// CAP_SYS_RESOURCE to raise them), --init (catatonit as PID 1), no network
// (the test VMI has no interface), the guest images read-only, no
// privileges beyond the defaults, and /dev/kvm only where the node has
// usable KVM (these nodes have only PVM, so TCG).
func runArgs(dir string, kvm bool, extra []string) []string {
	args := []string{"run", "--rm", "--runtime", "runc", "--init", "--network", "none",
		"--cidfile", filepath.Join(dir, "cid"),
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
		"-v", built.ImageDir() + ":/usr/share/crashloop/images:ro",
		"-v", dir + "/vmi:/vmi:ro",
		"-v", dir + "/log:/var/log/crashloop",
		"-v", capsCache + ":/var/cache/crashloop/qemu-capabilities"}
	if kvm {
		args = append(args, "--device", "/dev/kvm")
	}
	args = append(args, extra...)
	return append(args, Image, "--log-level", "debug", "/vmi/vmi.yaml")
}

// Run starts the image on a fresh test-guest VMI (kernelArgs "" is the
// guest's default: it stays up) with extra podman flags, and waits for the
// container's ID. Cleanup removes the container by its ID if it is still
// there and checks that no QEMU of its domain survives.
func Run(kernelArgs string, extra ...string) *Container {
	uid := uuid.NewUUID()
	name := "img-" + string(uid)[:8]
	dir, err := os.MkdirTemp("", "cl-image-ft-")
	Expect(err).NotTo(HaveOccurred())
	for _, sub := range []string{"vmi", "log"} {
		Expect(os.Mkdir(filepath.Join(dir, sub), 0o755)).To(Succeed())
	}
	vm := ctlharness.TestGuestVM(name, "", nil, kernelArgs)
	vmi := &v1.VirtualMachineInstance{ObjectMeta: vm.Spec.Template.ObjectMeta, Spec: vm.Spec.Template.Spec}
	vmi.APIVersion, vmi.Kind = v1.GroupVersion.String(), "VirtualMachineInstance"
	vmi.Name, vmi.Namespace = name, vm.Namespace
	vmi.UID = uid
	data, err := yaml.Marshal(vmi)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "vmi", "vmi.yaml"), data, 0o644)).To(Succeed())

	kvm := nodeKVM()
	c := &Container{Name: name, Domain: vmi.Namespace + "_" + name, Dir: dir,
		stderr: &bytes.Buffer{}, done: make(chan struct{})}
	c.cmd = exec.Command("podman", runArgs(dir, kvm, extra)...)
	c.cmd.Stderr = c.stderr
	// conmon writes a file "oom" into its working folder when the
	// container's cgroup has an OOM kill (podman 4.3 does not look there):
	// keep it in the container's folder.
	c.cmd.Dir = dir
	stdout, err := c.cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	Expect(c.cmd.Start()).To(Succeed())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ev, err := launcherapi.ParseEvent(sc.Bytes())
			if err != nil {
				GinkgoWriter.Printf("not an event: %v\n", err)
				continue
			}
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}
		err := c.cmd.Wait()
		c.exit = 0
		if ee, ok := err.(*exec.ExitError); ok {
			c.exit = ee.ExitCode()
		} else if err != nil {
			c.exit = -1
		}
		close(c.done)
	}()
	DeferCleanup(c.cleanup)
	Eventually(func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "cid"))
		return strings.TrimSpace(string(b))
	}).WithTimeout(60*time.Second).WithPolling(50*time.Millisecond).ShouldNot(BeEmpty(), "podman wrote no container ID; stderr:\n%s", c.stderr)
	b, _ := os.ReadFile(filepath.Join(dir, "cid"))
	c.ID = strings.TrimSpace(string(b))
	return c
}

func (c *Container) cleanup() {
	if c.ID != "" {
		if _, err := podman("container", "exists", c.ID); err == nil {
			out, err := podman("rm", "--force", "--time", "0", c.ID)
			Expect(err).NotTo(HaveOccurred(), "removing container %s: %s", c.ID, out)
		}
	}
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	Eventually(func() []int { return qemu.FindQEMU(c.Domain, "") }).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).
		Should(BeEmpty(), "a QEMU of %s outlived its container", c.Domain)
	if CurrentSpecReport().Failed() {
		GinkgoWriter.Printf("podman/launcher stderr:\n%s\n", c.stderr.String())
		logs, _ := filepath.Glob(filepath.Join(c.Dir, "log", "*"))
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil {
				GinkgoWriter.Printf("%s:\n%s\n", filepath.Base(l), b)
			}
		}
	}
	Expect(os.RemoveAll(c.Dir)).To(Succeed())
}

// Events is what the container wrote on its stdout so far.
func (c *Container) Events() []launcherapi.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]launcherapi.Event(nil), c.events...)
}

// WaitFor waits up to timeout for the first event named name.
func (c *Container) WaitFor(name string, timeout time.Duration) launcherapi.Event {
	var found launcherapi.Event
	Eventually(func() (ok bool) {
		found, ok = c.find(name)
		return ok
	}).WithTimeout(timeout).WithPolling(50*time.Millisecond).Should(BeTrue(),
		func() string {
			return fmt.Sprintf("no %s event; events so far: %v\nstderr:\n%s", name, c.names(), c.stderr)
		})
	return found
}

// Exit waits up to timeout for `podman run` to end and returns its exit
// code (the container's).
func (c *Container) Exit(timeout time.Duration) int {
	Eventually(c.done).WithTimeout(timeout).Should(BeClosed(), func() string {
		return fmt.Sprintf("the container did not exit; events: %v", c.names())
	})
	return c.exit
}

// Kill sends sig to the container through podman.
func (c *Container) Kill(sig string) {
	out, err := podman("kill", "--signal", sig, c.ID)
	Expect(err).NotTo(HaveOccurred(), "podman kill -s %s %s: %s", sig, c.ID, out)
}

// Inspect reads one field of `podman inspect` (a Go template).
func (c *Container) Inspect(format string) string {
	out, err := podman("container", "inspect", "--format", format, c.ID)
	Expect(err).NotTo(HaveOccurred(), "podman inspect %s: %s", c.ID, out)
	return out
}

// find returns the first event named name seen so far.
func (c *Container) find(name string) (launcherapi.Event, bool) {
	for _, ev := range c.Events() {
		if ev.Event == name {
			return ev, true
		}
	}
	return launcherapi.Event{}, false
}

func (c *Container) names() []string {
	var n []string
	for _, e := range c.Events() {
		n = append(n, e.Event+"/"+e.Reason)
	}
	return n
}

func itoa(i int) string { return strconv.Itoa(i) }

func final(ev launcherapi.Event) (string, string, int) {
	code := -1
	if ev.ExitCode != nil {
		code = *ev.ExitCode
	}
	return ev.Phase, ev.Reason, code
}

// OOMKills follows the container's memory cgroup (cgroup v1:
// memory.oom_control, v2: memory.events) and returns a function that gives
// the highest oom_kill count seen: the counters go with the cgroup when
// the container ends, so they are read every 10 ms while it runs.
func (c *Container) OOMKills() func() int {
	file := memcg.CounterFile("", c.Inspect("{{.State.CgroupPath}}"))
	_, err := os.Stat(file)
	Expect(err).NotTo(HaveOccurred(), "the container's memory cgroup counters")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-c.done; cancel() }()
	f := memcg.Follow(ctx, file, 10*time.Millisecond)
	return func() int { n, _ := f.Most(); return n }
}
