package controller_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// vmSpec describes a test VM manifest.
type vmSpec struct {
	name, strategy string
	failFast       bool
	kernelArgs     string // default testguest.KernelArgs
	annotations    map[string]string
}

// manifest renders the VM: the test guest (testguest.VM).
func (s vmSpec) manifest() string {
	ann := map[string]string{}
	for k, v := range s.annotations {
		ann[k] = v
	}
	if s.failFast {
		ann[v1.FuncTestLauncherFailFastAnnotation] = "true"
	}
	m, err := testguest.Manifest(testguest.VM(s.name, v1.VirtualMachineRunStrategy(s.strategy), ann, s.kernelArgs))
	Expect(err).NotTo(HaveOccurred())
	return m
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

// proc is a running virt-controller (see functests/ctlharness).
type proc = ctlharness.Proc

// startController runs virt-controller run with -o json and seed 4242.
func (w *workspace) startController(extra []string, manifests ...string) *proc {
	return ctlharness.Start(ctlharness.Binaries{Controller: suite.controller, Launcher: suite.launcher, ImageDir: suite.imageDir},
		w.state, w.dir, 4242, extra, manifests...)
}

// cli runs a virt-controller command and returns stdout, stderr, exit code.
func cli(args ...string) (string, string, int) { return ctlharness.CLI(suite.controller, args...) }

// status reads a VM with "virt-controller status NAME -o json".
func (w *workspace) status(name string) *v1.VirtualMachine {
	return ctlharness.Status(suite.controller, w.state, name)
}

func failCount(vm *v1.VirtualMachine) int { return ctlharness.FailCount(vm) }

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
