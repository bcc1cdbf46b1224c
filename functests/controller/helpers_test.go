package controller_test

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// vmSpec describes a test VM manifest.
type vmSpec struct {
	name, strategy string
	failFast       bool
	kernelArgs     string // default "console=ttyS0 quiet panic=-1"
	annotations    map[string]string
}

// manifest renders the VM in the shape of testdata/crashloop-vm.yaml.
func (s vmSpec) manifest() string {
	args := s.kernelArgs
	if args == "" {
		args = "console=ttyS0 quiet panic=-1"
	}
	ann := map[string]string{}
	for k, v := range s.annotations {
		ann[k] = v
	}
	if s.failFast {
		ann[v1.FuncTestLauncherFailFastAnnotation] = "true"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\n  namespace: default\nspec:\n", s.name)
	if s.strategy != "" {
		fmt.Fprintf(&b, "  runStrategy: %s\n", s.strategy)
	}
	b.WriteString("  template:\n    metadata:\n")
	if len(ann) > 0 {
		b.WriteString("      annotations:\n")
		for k, v := range ann {
			fmt.Fprintf(&b, "        %s: %q\n", k, v)
		}
	}
	fmt.Fprintf(&b, `    spec:
      terminationGracePeriodSeconds: 10
      domain:
        cpu: {cores: 1}
        memory: {guest: 256Mi}
        firmware:
          kernelBoot:
            kernelArgs: %q
            container: {image: "localhost/crashloop/test-guest:latest", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
        devices:
          disks: [{name: scratch, disk: {bus: virtio}}]
      volumes:
        - {name: scratch, containerDisk: {image: "localhost/crashloop/test-guest:latest"}}
`, args)
	return b.String()
}

// workspace is one spec's folder: manifests and a state folder.
type workspace struct {
	dir, state string
}

func newWorkspace() *workspace {
	dir, err := os.MkdirTemp("", "crashloop-functest-")
	Expect(err).NotTo(HaveOccurred())
	w := &workspace{dir: dir, state: filepath.Join(dir, "state")}
	DeferCleanup(func() {
		stopLeftoverLaunchers(w.state)
		_ = os.RemoveAll(dir)
	})
	return w
}

// write puts a manifest file in the workspace and returns its path.
func (w *workspace) write(file, content string) string {
	p := filepath.Join(w.dir, file)
	Expect(os.WriteFile(p, []byte(content), 0o644)).To(Succeed())
	return p
}

// proc is a running virt-controller with its JSON lines collected.
type proc struct {
	cmd    *exec.Cmd
	stderr string
	done   chan struct{}

	mu     sync.Mutex
	events []controller.Event
}

// startController runs virt-controller run with -o json.
func (w *workspace) startController(extra []string, manifests ...string) *proc {
	args := append([]string{"run", "-o", "json", "--state-dir", w.state, "--seed", "4242",
		"--launcher", suite.launcher, "--launcher-arg=--image-dir=" + suite.imageDir}, extra...)
	args = append(args, manifests...)
	cmd := exec.Command(suite.controller, args...)
	stdout, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	p := &proc{cmd: cmd, stderr: filepath.Join(w.dir, fmt.Sprintf("controller-%d.stderr", time.Now().UnixNano())), done: make(chan struct{})}
	errf, err := os.Create(p.stderr)
	Expect(err).NotTo(HaveOccurred())
	cmd.Stderr = errf
	Expect(cmd.Start()).To(Succeed())
	go func() {
		defer close(p.done)
		defer errf.Close()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e controller.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				p.mu.Lock()
				p.events = append(p.events, e)
				p.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	DeferCleanup(p.terminate)
	Eventually(func() int { return len(p.eventsOf("ControllerStarted")) }, 30*time.Second, 10*time.Millisecond).
		Should(Equal(1), func() string { return "controller did not start: " + p.stderrText() })
	return p
}

// terminate stops the controller with SIGTERM (it stops its VMIs) and
// waits; SIGKILL after 60 s.
func (p *proc) terminate() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill9 kills the controller with SIGKILL, as a crash would.
func (p *proc) kill9() {
	Expect(p.cmd.Process.Kill()).To(Succeed())
	Eventually(p.done, 10*time.Second).Should(BeClosed())
}

// eventsOf returns the events of one kind (all when kind is "").
func (p *proc) eventsOf(kind string) []controller.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []controller.Event
	for _, e := range p.events {
		if kind == "" || e.Event == kind {
			out = append(out, e)
		}
	}
	return out
}

func (p *proc) stderrText() string {
	b, _ := os.ReadFile(p.stderr)
	return string(b)
}

// cli runs a virt-controller command and returns stdout, stderr, exit code.
func cli(args ...string) (string, string, int) {
	cmd := exec.Command(suite.controller, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		Fail(fmt.Sprintf("running virt-controller %v: %v", args, err))
	}
	return out.String(), errb.String(), code
}

// status reads a VM with "virt-controller status NAME -o json".
func (w *workspace) status(name string) *v1.VirtualMachine {
	out, errs, code := cli("status", name, "-o", "json", "--state-dir", w.state)
	Expect(code).To(Equal(0), "status %s: %s", name, errs)
	vm := &v1.VirtualMachine{}
	Expect(json.Unmarshal([]byte(out), vm)).To(Succeed(), out)
	return vm
}

func failCount(vm *v1.VirtualMachine) int {
	if vm.Status.StartFailure == nil {
		return 0
	}
	return vm.Status.StartFailure.ConsecutiveFailCount
}

// record reads a VM's state file as saved by the controller.
func (w *workspace) record(name string) *controller.Record {
	data, err := os.ReadFile(filepath.Join(w.state, "vms", "default_"+name+".json"))
	Expect(err).NotTo(HaveOccurred())
	rec, err := controller.ParseRecord(data)
	Expect(err).NotTo(HaveOccurred())
	return rec
}

// launchDirs lists a VM's launcher folders by attempt.
func (w *workspace) launchDirs(name string) map[int]string {
	entries, _ := os.ReadDir(filepath.Join(w.state, "launchers", "default_"+name))
	out := map[int]string{}
	for _, e := range entries {
		n, _, _ := strings.Cut(e.Name(), "-")
		if a, err := strconv.Atoi(n); err == nil {
			out[a] = filepath.Join(w.state, "launchers", "default_"+name, e.Name())
		}
	}
	return out
}

// stopLeftoverLaunchers stops launchers that the specs' controllers
// started and left behind (after a kill -9): it reads their PIDs from the
// state records and checks each against its start time before signalling.
func stopLeftoverLaunchers(state string) {
	files, _ := filepath.Glob(filepath.Join(state, "vms", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rec, err := controller.ParseRecord(data)
		if err != nil || rec.Launcher == nil || !rec.Launcher.Alive() {
			continue
		}
		_ = rec.Launcher.Signal(syscall.SIGTERM)
		deadline := time.Now().Add(30 * time.Second)
		for rec.Launcher.Alive() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if rec.Launcher.Alive() {
			_ = rec.Launcher.Signal(syscall.SIGKILL)
		}
	}
}

// requireImages fails the spec early, with the reason, when the guest
// image is missing.
func requireImages() {
	_, err := os.Stat(filepath.Join(suite.imageDir, "images.json"))
	Expect(err).NotTo(HaveOccurred(), "this spec boots the test guest: build it with `make images` (or set CRASHLOOP_IMAGE_DIR)")
}
