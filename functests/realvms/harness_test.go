package realvms_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// cloudGuestImage is the cloud guest's image reference (make cloud-image).
const cloudGuestImage = "localhost/crashloop/cloud-guest:latest"

// cloudGuestArchive is the cloud guest's OCI archive in the image folder
// of `make images`.
func cloudGuestArchive() string { return filepath.Join(built.ImageDir(), "cloud-guest.oci.tar") }

// ociImages is the suite's image folder, whose images.json maps the cloud
// guest to its oci-archive reference.
func ociImages() string { return filepath.Join(suiteDir, "images") }

// Launch is one virt-launcher process. Its events go to a file and its log
// to another, both in its own folder, read back when a spec asks.
type Launch struct {
	// Domain is the libvirt domain (namespace_name).
	Domain string
	// Dir holds the manifest, events.jsonl, launcher.log, the console log
	// and the runtime folder; nothing else of the launch lives elsewhere
	// but the suite's caches and claims.
	Dir, Console, Runtime string
	started               time.Time
	cmd                   *exec.Cmd
	done                  chan struct{}
	exit                  int
}

// Start runs the launcher on manifest (YAML text) for the VMI
// namespace/name with the suite's defaults and extra flags. Cleanup kills
// it if it still runs, then checks that no process of the launch (the
// launcher, its reaper, QEMU) survives, and removes its folder.
func Start(manifest, namespace, name string, flags ...string) *Launch {
	// A short folder: libvirt's monitor socket path below it must fit
	// the 108 bytes of a UNIX socket address.
	dir, err := os.MkdirTemp("", "rv-")
	Expect(err).NotTo(HaveOccurred())
	l := &Launch{Domain: namespace + "_" + name, Dir: dir, Console: filepath.Join(dir, "console.log"),
		Runtime: filepath.Join(dir, "r"), done: make(chan struct{})}
	path := filepath.Join(dir, "vm.yaml")
	Expect(os.WriteFile(path, []byte(manifest), 0o644)).To(Succeed())
	events, err := os.Create(filepath.Join(dir, "events.jsonl"))
	Expect(err).NotTo(HaveOccurred())
	logFile, err := os.Create(filepath.Join(dir, "launcher.log"))
	Expect(err).NotTo(HaveOccurred())
	args := append([]string{"--image-dir", built.ImageDir(), "--runtime-dir", l.Runtime, "--console-log", l.Console,
		"--cache-dir", filepath.Join(suiteDir, "cache", "qemu-capabilities"), "--log-level", "debug"}, flags...)
	l.cmd = exec.Command(built.Launcher(), append(args, path)...)
	l.cmd.Stdout, l.cmd.Stderr = events, logFile
	l.started = time.Now()
	Expect(l.cmd.Start()).To(Succeed())
	go func() {
		defer close(l.done)
		err := l.cmd.Wait()
		events.Close()
		logFile.Close()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			l.exit = ee.ExitCode()
		default:
			l.exit = -1
		}
	}()
	DeferCleanup(l.cleanup)
	return l
}

func (l *Launch) cleanup() {
	select {
	case <-l.done:
	default:
		_ = l.cmd.Process.Kill()
		<-l.done
	}
	Eventually(func() []int { return qemu.FindQEMU(l.Domain, "") }).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).
		Should(BeEmpty(), "a QEMU of %s outlived its launcher", l.Domain)
	Eventually(func() []int { return processesNaming(l.Dir) }).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).
		Should(BeEmpty(), "a process of the launch in %s outlived it", l.Dir)
	if CurrentSpecReport().Failed() {
		GinkgoWriter.Printf("launcher log:\n%s\nconsole:\n%s\n", l.Log(), l.ConsoleText())
	}
	Expect(os.RemoveAll(l.Dir)).To(Succeed())
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

// Events parses what the launcher wrote on stdout so far.
func (l *Launch) Events() []launcherapi.Event {
	f, err := os.Open(filepath.Join(l.Dir, "events.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []launcherapi.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if ev, err := launcherapi.ParseEvent(sc.Bytes()); err == nil {
			out = append(out, ev)
		}
	}
	return out
}

// WaitFor waits up to timeout for the first event named name.
func (l *Launch) WaitFor(name string, timeout time.Duration) launcherapi.Event {
	var found launcherapi.Event
	Eventually(func() bool {
		for _, ev := range l.Events() {
			if ev.Event == name {
				found = ev
				return true
			}
			if ev.Final() {
				StopTrying(fmt.Sprintf("the launch ended %s/%s (%s) before %s", ev.Phase, ev.Reason, ev.Message, name)).Now()
			}
		}
		return false
	}).WithTimeout(timeout).WithPolling(100*time.Millisecond).Should(BeTrue(), func() string {
		return fmt.Sprintf("no %s event; events: %v\nlog:\n%s", name, l.names(), l.Log())
	})
	return found
}

func (l *Launch) names() []string {
	var n []string
	for _, ev := range l.Events() {
		n = append(n, ev.Event+"/"+ev.Reason)
	}
	return n
}

// Exit waits up to timeout for the launcher to end and returns its code.
func (l *Launch) Exit(timeout time.Duration) int {
	select {
	case <-l.done:
		return l.exit
	case <-time.After(timeout):
		Fail(fmt.Sprintf("the launcher did not exit within %v; events: %v", timeout, l.names()))
	}
	return -1
}

// Stop sends SIGTERM, the graceful stop.
func (l *Launch) Stop() { Expect(l.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed()) }

// Log is the launcher's stderr so far.
func (l *Launch) Log() string {
	b, _ := os.ReadFile(filepath.Join(l.Dir, "launcher.log"))
	return string(b)
}

// ConsoleText is the serial console so far.
func (l *Launch) ConsoleText() string {
	b, _ := os.ReadFile(l.Console)
	return string(b)
}

// ConsoleShows waits up to timeout for text on the serial console and
// returns how long after the launcher's start it was first seen.
func (l *Launch) ConsoleShows(text string, timeout time.Duration) time.Duration {
	Eventually(l.ConsoleText).WithTimeout(timeout).WithPolling(200*time.Millisecond).Should(ContainSubstring(text),
		func() string { return fmt.Sprintf("events: %v\nlog:\n%s", l.names(), l.Log()) })
	return time.Since(l.started)
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
