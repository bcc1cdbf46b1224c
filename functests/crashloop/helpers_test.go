package crashloop_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/ctltimeline"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/timeline"
)

// faultPrefix is the annotation prefix of the fault catalog.
const faultPrefix = "faults.crashloop.dev/"

// vm describes a test VirtualMachine booting the test guest.
type vm struct {
	name, strategy string
	failFast       bool
	faults         map[string]string // fault name -> term
	kernelArgs     string
}

// manifest renders the VM: the test guest (testguest.VM) with
// its faults as annotations, under runStrategy Always unless told.
func (s vm) manifest() string {
	ann := map[string]string{}
	for f, term := range s.faults {
		ann[faultPrefix+f] = term
	}
	if s.failFast {
		ann[v1.FuncTestLauncherFailFastAnnotation] = "true"
	}
	strategy := v1.VirtualMachineRunStrategy(s.strategy)
	if strategy == "" {
		strategy = v1.RunStrategyAlways
	}
	m, err := testguest.Manifest(testguest.VM(s.name, strategy, ann, s.kernelArgs))
	Expect(err).NotTo(HaveOccurred())
	return m
}

// workspace is one spec's folder: manifests and a state folder, removed
// when the spec ends.
type workspace struct{ dir, state string }

func newWorkspace() *workspace {
	dir, err := os.MkdirTemp("", "crashloop-lane-")
	Expect(err).NotTo(HaveOccurred())
	w := &workspace{dir: dir, state: filepath.Join(dir, "state")}
	DeferCleanup(func() { _ = os.RemoveAll(dir) })
	return w
}

// write puts a manifest in the workspace (atomically, so the controller's
// watcher never reads half a file) and returns its path.
func (w *workspace) write(s vm) string {
	p := filepath.Join(w.dir, s.name+".yaml")
	tmp := p + ".tmp"
	Expect(os.WriteFile(tmp, []byte(s.manifest()), 0o644)).To(Succeed())
	Expect(os.Rename(tmp, p)).To(Succeed())
	return p
}

// proc is a running virt-controller (see functests/ctlharness).
type proc = ctlharness.Proc

// run starts "virt-controller run -o json" on the workspace's state folder.
func (w *workspace) run(seed int, extra []string, manifests ...string) *proc {
	return ctlharness.Start(ctlharness.Binaries{Controller: suite.controller, Launcher: suite.launcher, ImageDir: suite.imageDir},
		w.state, w.dir, seed, extra, manifests...)
}

// cli runs a virt-controller command: stdout, stderr, exit code.
func cli(args ...string) (string, string, int) { return ctlharness.CLI(suite.controller, args...) }

// status reads a VM with "virt-controller status NAME -o json".
func (w *workspace) status(name string) *v1.VirtualMachine {
	return ctlharness.Status(suite.controller, w.state, name)
}

func failCount(m *v1.VirtualMachine) int { return ctlharness.FailCount(m) }

// launchDir is the folder the controller gave one attempt's launcher.
func (w *workspace) launchDir(name string, attempt int) string {
	matches, _ := filepath.Glob(filepath.Join(w.state, "launchers", "default_"+name, strconv.Itoa(attempt)+"-*"))
	if len(matches) != 1 {
		return ""
	}
	return matches[0]
}

// launches counts a VM's launcher folders.
func (w *workspace) launches(name string) int {
	entries, _ := os.ReadDir(filepath.Join(w.state, "launchers", "default_"+name))
	return len(entries)
}

// launcherEvents reads what one attempt's launcher wrote on stdout.
func (w *workspace) launcherEvents(name string, attempt int) []launcherapi.Event {
	dir := w.launchDir(name, attempt)
	if dir == "" {
		return nil
	}
	out, _ := launcherapi.ReadEvents(launcherapi.Dir(dir).Events())
	return out
}

func findEvent(evs []launcherapi.Event, name string) (launcherapi.Event, bool) {
	for _, e := range evs {
		if e.Event == name {
			return e, true
		}
	}
	return launcherapi.Event{}, false
}

// firedFaults names the faults one attempt's launcher said would fire
// (its Scheduled event), sorted and joined with "+".
func (w *workspace) firedFaults(name string, attempt int) string {
	sched, ok := findEvent(w.launcherEvents(name, attempt), launcherapi.EventScheduled)
	if !ok {
		return ""
	}
	var names []string
	if sched.Scheduled != nil {
		for _, d := range sched.Scheduled.Faults {
			names = append(names, d.Fault)
		}
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

// console reads one attempt's serial console log.
func (w *workspace) console(name string, attempt int) string {
	dir := w.launchDir(name, attempt)
	if dir == "" {
		return ""
	}
	b, _ := os.ReadFile(launcherapi.Dir(dir).Console())
	return string(b)
}

// saveTimeline writes the run's timeline as _build/artifacts/NAME.jsonl
// and NAME.svg, built from the controller's JSON lines and the launcher
// folders, and returns it.
func (w *workspace) saveTimeline(name, title string, p *proc) *timeline.Timeline {
	rec := ctltimeline.NewRecorder(title, w.state, 0)
	for _, e := range p.Events("", "") {
		rec.Observe(e)
	}
	base := filepath.Join(suite.artifacts, name)
	Expect(rec.WriteFiles(base)).To(Succeed())
	AddReportEntry("timeline", base+".{jsonl,svg}")
	fmt.Fprintf(GinkgoWriter, "timeline: %s.{jsonl,svg}\n", base)
	return rec.Timeline()
}

// report prints a number that a person reads in the CI log and attaches
// it to the JUnit report.
func report(name string, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	AddReportEntry(name, msg)
	fmt.Fprintf(GinkgoWriter, "REPORT %s: %s\n", name, msg)
	fmt.Printf("REPORT %s: %s\n", name, msg)
}
