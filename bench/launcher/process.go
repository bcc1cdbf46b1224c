package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/procfs"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// launched is a running launcher whose events are read from its stdout.
type launched struct {
	cmd    *exec.Cmd
	start  time.Time
	events chan launcherapi.Event
	seen   chan time.Time
	done   chan struct{}
	stderr strings.Builder
}

func startLauncher(argv []string) (*launched, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	l := &launched{cmd: cmd, events: make(chan launcherapi.Event, 16), seen: make(chan time.Time, 16), done: make(chan struct{})}
	cmd.Stderr = &l.stderr
	l.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(l.done)
		lines := spawn.NewLineWriter(launcherapi.NewFollower(func(ev launcherapi.Event) {
			l.events <- ev
			l.seen <- time.Now()
		}, nil).Line)
		_, _ = io.Copy(lines, out)
		lines.Flush()
	}()
	return l, nil
}

// waitFor reads events until name and returns when this process read it.
func (l *launched) waitFor(name string, timeout time.Duration) (time.Time, error) {
	at, _, err := l.waitForEvent(name, timeout)
	return at, err
}

// waitForEvent reads events until name and returns it and when this
// process read it.
func (l *launched) waitForEvent(name string, timeout time.Duration) (time.Time, launcherapi.Event, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-l.events:
			at := <-l.seen
			if ev.Event == name {
				return at, ev, nil
			}
			if ev.Final() {
				return time.Time{}, ev, fmt.Errorf("launcher ended with %s (%s: %s) before %s; stderr: %s", ev.Event, ev.Reason, ev.Message, name, l.stderr.String())
			}
		case <-l.done:
			return time.Time{}, launcherapi.Event{}, fmt.Errorf("launcher's output ended before a %s event; stderr: %s", name, l.stderr.String())
		case <-deadline:
			return time.Time{}, launcherapi.Event{}, fmt.Errorf("no %s event within %s", name, timeout)
		}
	}
}

// wait waits for the launcher to exit.
func (l *launched) wait(timeout time.Duration) error {
	select {
	case <-l.done:
	case <-time.After(timeout):
		return fmt.Errorf("launcher did not exit within %s", timeout)
	}
	err := l.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return err
	}
	return nil
}

// kill ends the launcher if it still runs (its process only: it tears
// down its own QEMU, and the caller checks for leftovers).
func (l *launched) kill() {
	if l.cmd.ProcessState != nil {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.done:
	case <-time.After(20 * time.Second):
		_ = l.cmd.Process.Kill()
	}
	_ = l.cmd.Wait()
	for _, pid := range qemu.FindQEMU(domainName, "") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// treeRSSKiB is the RSS of pid and its descendants, QEMU excluded: the
// launcher and whatever helper processes it runs (its reaper).
func treeRSSKiB(pid int) int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(n); ok {
			parent[n] = pp
		}
	}
	total := 0
	for n := range parent {
		if !descends(n, pid, parent) {
			continue
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n)); strings.HasPrefix(string(comm), "qemu-system") {
			continue
		}
		total += rssKiB(n)
	}
	return total
}

func descends(n, root int, parent map[int]int) bool {
	for i := 0; i < 64 && n > 1; i++ {
		if n == root {
			return true
		}
		n = parent[n]
	}
	return n == root
}

func ppid(pid int) (int, bool) {
	st, err := procfs.ReadStat(pid)
	return st.PPID, err == nil
}

func rssKiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}
