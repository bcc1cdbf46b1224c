package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// runOurs runs the herd on our virt-controller (real launchers, its own
// state folder, no API server) for d, in real time, and reads what it did
// from its JSON events. runningWithin > 0 adds the optional fail-soon
// window (--count-running-failures-within).
func runOurs(ctx context.Context, b bins, work string, sc scenario, n int, d, runningWithin time.Duration) (r result, err error) {
	r = result{Controller: "ours", VMs: n, Duration: d}
	if runningWithin > 0 {
		r.Controller = "ours, fail-soon " + runningWithin.String()
	}
	manifest := filepath.Join(work, "vms.yaml")
	if err := writeManifest(manifest, sc, n); err != nil {
		return r, err
	}
	state := filepath.Join(work, "state")
	if err := os.MkdirAll(filepath.Join(state, "vms"), 0o755); err != nil {
		return r, err
	}
	saves, err := countSaves(filepath.Join(state, "vms"))
	if err != nil {
		return r, err
	}
	defer saves.close()
	events := filepath.Join(work, "events.jsonl")
	args := []string{"run", "-o", "json", "--state-dir", state, "--seed", "1", "--launcher", b.launcher,
		// The launchers keep their default --runtime-dir (/run/crashloop):
		// libvirt's sockets under a deep folder would pass the 108-byte
		// limit of a socket path.
		"--launcher-arg=--image-dir=" + b.imageDir, "--launcher-arg=--log-level=warn"}
	if runningWithin > 0 {
		args = append(args, "--count-running-failures-within", runningWithin.String())
	}
	clock := watchClock()
	start := time.Now()
	p, err := spawn.Start(spawn.Spec{Path: b.controller, Args: append(args, manifest),
		StdoutFile: events, StderrFile: filepath.Join(work, "controller.log"), Truncate: true})
	if err != nil {
		return r, fmt.Errorf("starting our virt-controller: %w", err)
	}
	comps := []component{{Name: "virt-controller (ours)", PID: p.PID()}}
	cpu0 := sampleCPU(comps)
	select {
	case <-p.Done():
		clock.close()
		return r, fmt.Errorf("our virt-controller exited early (%v); see %s", p.Exit(), filepath.Join(work, "controller.log"))
	case <-time.After(d):
	case <-ctx.Done():
	}
	end := time.Now()
	r.ClockSteps = clock.close()
	cpu1 := sampleCPU(comps)
	n0 := saves.n.Load()
	st, err := p.Stop(context.Background(), 2*time.Minute)
	if err != nil || st.Killed {
		return r, fmt.Errorf("stopping our virt-controller: %v (killed %v)", err, st.Killed)
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.CPU = diffCPU(comps, cpu0, cpu1)
	r.Writes = float64(n0) / end.Sub(start).Seconds()
	if err := r.readEvents(events, start, end); err != nil {
		return r, err
	}
	r.finish(start, end)
	return r, nil
}

// readEvents fills the result from the controller's JSON lines: Started
// is a new VMI (and launcher); one with PlannedAt is a retry;
// BackoffPlanned is a counted failure.
func (r *result) readEvents(path string, start, end time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e controller.Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Time.After(end) || e.Time.Before(start) {
			continue
		}
		if e.PrintableStatus == string(v1.VirtualMachineStatusCrashLoopBackOff) {
			r.CrashLoop = true
		}
		switch e.Event {
		case controller.EventStarted:
			r.VMIs++
			r.Pods++
			if e.PlannedAt != nil {
				r.Retries = append(r.Retries, retry{VM: e.VM, Count: e.FailCount, Planned: *e.PlannedAt, Actual: e.Time})
			}
		case controller.EventBackoffPlanned:
			r.Failures++
			r.MaxCount = max(r.MaxCount, e.FailCount)
		}
	}
	r.Pending = r.Failures - len(r.Retries)
	return sc.Err()
}

// writeManifest writes the herd as one multi-document YAML file.
func writeManifest(path string, sc scenario, n int) error {
	docs := make([]string, 0, n)
	for i := range n {
		data, err := yaml.Marshal(sc.vm(i))
		if err != nil {
			return fmt.Errorf("rendering VM %d: %w", i, err)
		}
		docs = append(docs, string(data))
	}
	return os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644)
}

// saveCounter counts our controller's state saves: each one writes the
// record's spare file (.NAME.json.swap) and closes it, then swaps names.
type saveCounter struct {
	f *os.File
	n atomic.Int64
}

// countSaves watches dir with inotify until close.
func countSaves(dir string) (*saveCounter, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify on %s: %w", dir, err)
	}
	c := &saveCounter{f: os.NewFile(uintptr(fd), "inotify")}
	go c.read()
	return c, nil
}

// read counts until the inotify file is closed.
func (c *saveCounter) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.f.Read(buf)
		if err != nil {
			return // closed
		}
		c.n.Add(int64(countSwapCloses(buf[:n])))
	}
}

// countSwapCloses counts the events on spare files in a buffer of inotify
// events.
func countSwapCloses(buf []byte) int {
	n := 0
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		if strings.HasSuffix(strings.TrimRight(string(name), "\x00"), ".swap") {
			n++
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	return n
}

// close stops the count.
func (c *saveCounter) close() { _ = c.f.Close() }
