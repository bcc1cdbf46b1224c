// Package launchharness runs one virt-launcher for the functional suites
// (functests/launcher, functests/realvms, functests/image): the launcher
// binary with a command line built by launcherapi.Args, or anything that
// runs it with the launcher's stdout as its own (podman run of the
// launcher image). It reads the event lines as they come, waits on them
// with deadlines, and at cleanup checks that no QEMU of the domain and no
// process of the launch outlives it, then removes the launch's folder.
package launchharness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// Spec is one launch to run.
type Spec struct {
	// Namespace and Name are the VMI's; its libvirt domain is
	// Namespace_Name.
	Namespace, Name string
	// Manifest is the manifest (a VMI, a VM or a cluster dump), written to
	// the launch folder as vmi.yaml.
	Manifest string
	// Args are the launcher's flags. The harness fills in what is not
	// set: the built image folder, a runtime folder and a console log in
	// the launch folder, the debug log level and the manifest. Flags a
	// spec passes as text go in Args.Extra.
	Args launcherapi.Args
	// Command, when set, is what runs instead of the launcher binary,
	// given the launch folder (podman run of the launcher image); its
	// stdout must be the launcher's. Args are then not used.
	Command func(dir string) (path string, args []string)
	// Stop, when set, ends what Command started at cleanup before the
	// harness kills the process it started (podman rm of the container).
	Stop func(l *Launch)
}

// Launch is one running (or ended) launch.
type Launch struct {
	// Name is the VMI's name, Domain its libvirt domain.
	Name, Domain string
	// Dir is the launch folder: the manifest, events.jsonl (the stdout),
	// launcher.log (the stderr), the console log and the runtime folder.
	Dir string
	// Console is the guest's serial console log, Runtime the launcher's
	// --runtime-dir.
	Console, Runtime string

	spec    Spec
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed once the process was waited for
	exit    int           // its exit code once done is closed (-1: killed by a signal)

	mu      sync.Mutex
	events  []launcherapi.Event
	closed  bool          // the stdout ended
	changed chan struct{} // closed (and replaced) when events or closed change
	next    int           // the cursor of Next and WaitFor
}

// Start runs the launch and registers its cleanup: kill the process if it
// still runs, check that no QEMU of the domain and no process naming the
// launch folder survives, print the log and console when the spec failed,
// remove the folder (also when the launcher never started).
func Start(s Spec) *Launch {
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	// A short folder: libvirt's monitor socket path below it must fit the
	// 108 bytes of a UNIX socket address.
	dir, err := os.MkdirTemp("", "cl-lh-")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	// Registered first, so it runs last: the folder goes even when the
	// launcher never started (a missing binary fails the spec below) or
	// when cleanup's leak checks fail.
	ginkgo.DeferCleanup(os.RemoveAll, dir)
	l := &Launch{Name: s.Name, Domain: s.Namespace + "_" + s.Name, Dir: dir,
		Console: filepath.Join(dir, launcherapi.ConsoleFile), Runtime: filepath.Join(dir, "r"),
		spec: s, done: make(chan struct{}), changed: make(chan struct{})}
	manifest := filepath.Join(dir, "vmi.yaml")
	gomega.Expect(os.WriteFile(manifest, []byte(s.Manifest), 0o644)).To(gomega.Succeed())
	path, args := built.Launcher(), l.args(manifest)
	if s.Command != nil {
		path, args = s.Command(dir)
	}
	l.cmd = exec.Command(path, args...)
	// conmon writes a file "oom" into its working folder when the
	// container's cgroup has an OOM kill: keep it in the launch folder.
	l.cmd.Dir = dir
	logFile, err := os.Create(filepath.Join(dir, launcherapi.LogFile))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	l.cmd.Stderr = logFile
	stdout, err := l.cmd.StdoutPipe()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	l.started = time.Now()
	gomega.Expect(l.cmd.Start()).To(gomega.Succeed())
	go l.read(stdout, logFile)
	ginkgo.DeferCleanup(l.cleanup)
	return l
}

// args is the launcher's command line: the spec's Args with the harness's
// defaults.
func (l *Launch) args(manifest string) []string {
	a := l.spec.Args
	if a.ImageDir == "" {
		a.ImageDir = built.ImageDir()
	}
	if a.RuntimeDir == "" {
		a.RuntimeDir = l.Runtime
	}
	if a.ConsoleLog == "" {
		a.ConsoleLog = l.Console
	}
	if a.LogLevel == "" {
		a.LogLevel = "debug"
	}
	a.Manifest = manifest
	return a.Build()
}

// read collects the event lines (and keeps them in events.jsonl), then
// waits for the process.
func (l *Launch) read(stdout io.Reader, logFile *os.File) {
	file, err := os.Create(filepath.Join(l.Dir, launcherapi.EventsFile))
	if err != nil {
		ginkgo.GinkgoWriter.Printf("events file: %v\n", err)
	}
	follow := launcherapi.NewFollower(func(ev launcherapi.Event) { l.update(func() { l.events = append(l.events, ev) }) },
		func(_ []byte, err error) { ginkgo.GinkgoWriter.Printf("%s: not an event: %v\n", l.Name, err) })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if file != nil {
			_, _ = file.Write(append(sc.Bytes(), '\n'))
		}
		follow.Line(sc.Bytes())
	}
	if file != nil {
		file.Close()
	}
	l.update(func() { l.closed = true })
	err = l.cmd.Wait()
	logFile.Close()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		l.exit = ee.ExitCode()
	default:
		l.exit = -1
	}
	close(l.done)
}

func (l *Launch) update(change func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	change()
	close(l.changed)
	l.changed = make(chan struct{})
}

// Next waits up to timeout for the event after the last one Next or
// WaitFor returned.
func (l *Launch) Next(timeout time.Duration) launcherapi.Event {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		if l.next < len(l.events) {
			ev := l.events[l.next]
			l.next++
			l.mu.Unlock()
			return ev
		}
		closed, changed := l.closed, l.changed
		l.mu.Unlock()
		if closed {
			ginkgo.Fail(fmt.Sprintf("the launcher closed its output; events: %v\nlog:\n%s", l.names(), l.Log()))
		}
		select {
		case <-changed:
		case <-deadline.C:
			ginkgo.Fail(fmt.Sprintf("no event within %v; events: %v\nlog:\n%s", timeout, l.names(), l.Log()))
		}
	}
}

// WaitFor skips events until one named name arrives, up to timeout; a
// final event of another name ends the wait at once.
func (l *Launch) WaitFor(name string, timeout time.Duration) launcherapi.Event {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			ginkgo.Fail(fmt.Sprintf("no %s event within %v; events: %v\nlog:\n%s", name, timeout, l.names(), l.Log()))
		}
		ev := l.Next(left)
		if ev.Event == name {
			return ev
		}
		if ev.Final() {
			ginkgo.Fail(fmt.Sprintf("the launch ended %s/%s (%s) before %s; events: %v", ev.Phase, ev.Reason, ev.Message, name, l.names()))
		}
	}
}

// Events are the events seen so far.
func (l *Launch) Events() []launcherapi.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]launcherapi.Event(nil), l.events...)
}

// Find returns the first event named name seen so far.
func (l *Launch) Find(name string) (launcherapi.Event, bool) {
	for _, ev := range l.Events() {
		if ev.Event == name {
			return ev, true
		}
	}
	return launcherapi.Event{}, false
}

func (l *Launch) names() []string {
	var n []string
	for _, ev := range l.Events() {
		n = append(n, ev.Event+"/"+ev.Reason)
	}
	return n
}

// Exit waits up to timeout for the process to end and returns its exit
// code (-1 when a signal killed it).
func (l *Launch) Exit(timeout time.Duration) int {
	select {
	case <-l.done:
		return l.exit
	case <-time.After(timeout):
		ginkgo.Fail(fmt.Sprintf("the launcher did not exit within %v; events: %v", timeout, l.names()))
	}
	return -1
}

// Done is closed once the process ended.
func (l *Launch) Done() <-chan struct{} { return l.done }

// Started is when the process was started.
func (l *Launch) Started() time.Time { return l.started }

// Signal sends sig to the process the harness started.
func (l *Launch) Signal(sig syscall.Signal) {
	gomega.Expect(l.cmd.Process.Signal(sig)).To(gomega.Succeed())
}

// Log is the launcher's stderr so far.
func (l *Launch) Log() string {
	b, _ := os.ReadFile(filepath.Join(l.Dir, launcherapi.LogFile))
	return string(b)
}

// LogLines are the launcher's log lines that contain text.
func (l *Launch) LogLines(text string) []string {
	var out []string
	for _, line := range strings.Split(l.Log(), "\n") {
		if strings.Contains(line, text) {
			out = append(out, line)
		}
	}
	return out
}

// ConsoleText is the serial console so far.
func (l *Launch) ConsoleText() string {
	b, _ := os.ReadFile(l.Console)
	return string(b)
}

// ConsoleShows waits up to timeout for text on the serial console and
// returns how long after the start it was seen.
func (l *Launch) ConsoleShows(text string, timeout time.Duration) time.Duration {
	gomega.Eventually(l.ConsoleText).WithTimeout(timeout).WithPolling(100*time.Millisecond).Should(gomega.ContainSubstring(text),
		func() string { return fmt.Sprintf("events: %v\nlog:\n%s", l.names(), l.Log()) })
	return time.Since(l.started)
}

// RuntimeEntries lists what is left in the launcher's runtime folder.
func (l *Launch) RuntimeEntries() []string {
	entries, _ := os.ReadDir(l.Runtime)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Final is the phase, reason and exit code of a final event (-1 when it
// has none).
func Final(ev launcherapi.Event) (string, string, int) {
	code := -1
	if ev.ExitCode != nil {
		code = *ev.ExitCode
	}
	return ev.Phase, ev.Reason, code
}

func (l *Launch) cleanup() {
	if l.spec.Stop != nil {
		l.spec.Stop(l)
		select {
		case <-l.done:
		case <-time.After(60 * time.Second):
		}
	}
	select {
	case <-l.done:
	default:
		_ = l.cmd.Process.Kill()
		<-l.done
	}
	gomega.Eventually(func() []int { return qemu.FindQEMU(l.Domain, "") }).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).
		Should(gomega.BeEmpty(), "a QEMU of %s outlived its launcher", l.Domain)
	gomega.Eventually(func() []int { return processesNaming(l.Dir) }).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).
		Should(gomega.BeEmpty(), "a process of the launch in %s outlived it", l.Dir)
	if ginkgo.CurrentSpecReport().Failed() {
		ginkgo.GinkgoWriter.Printf("launcher log:\n%s\nconsole:\n%s\n", l.Log(), l.ConsoleText())
		if b, err := os.ReadFile(strings.TrimSuffix(l.Console, ".log") + ".libvirt.log"); err == nil {
			ginkgo.GinkgoWriter.Printf("libvirt log:\n%s\n", b)
		}
	}
}

// processesNaming lists the processes whose command line contains s.
func processesNaming(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
