package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// harness runs one Controller over fake launchers for a test.
type harness struct {
	t      *testing.T
	c      *Controller
	cancel context.CancelFunc
	done   chan error

	mu     sync.Mutex
	events []Event
}

// vmYAML renders a VM manifest for tests.
func vmYAML(name, strategy string, annotations map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\nspec:\n", name)
	if strategy != "" {
		fmt.Fprintf(&b, "  runStrategy: %s\n", strategy)
	}
	b.WriteString("  template:\n    metadata:\n")
	if len(annotations) > 0 {
		b.WriteString("      annotations:\n")
		for k, v := range annotations {
			fmt.Fprintf(&b, "        %s: %q\n", k, v)
		}
	}
	b.WriteString("    spec:\n      terminationGracePeriodSeconds: 1\n      domain:\n        devices: {}\n")
	return b.String()
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func testConfig(stateDir string, scale float64) Config {
	self, _ := os.Executable()
	return Config{
		StateDir: stateDir, Seed: 42,
		Launcher:      LauncherOptions{Path: self, Env: []string{"FAKE_LAUNCHER=1"}, PollInterval: 10 * time.Millisecond},
		Policy:        backoff.Policy{Scale: scale},
		StartTimeout:  launcherapi.FixedStartTimeout(time.Second),
		KillMargin:    2 * time.Second,
		WatchInterval: 20 * time.Millisecond,
	}
}

func startHarness(t *testing.T, cfg Config, paths ...string) *harness {
	t.Helper()
	h := &harness{t: t, done: make(chan error, 1)}
	cfg.Observer = ObserverFunc(func(e Event) {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	})
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ReadManifests(paths)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.c, h.cancel = c, cancel
	go func() { h.done <- c.Run(ctx, ms) }()
	t.Cleanup(h.stop)
	return h
}

// stop shuts the controller down and waits for it.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("controller Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Error("controller did not stop within 20s")
	}
}

func (h *harness) snapshot(name string) *Snapshot {
	for _, s := range h.c.Snapshots() {
		if s.VM.Name == name {
			return s
		}
	}
	return nil
}

// waitFor polls until cond holds for VM name or the timeout passes.
func (h *harness) waitFor(name string, timeout time.Duration, what string, cond func(*Snapshot) bool) *Snapshot {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := h.snapshot(name)
		if s != nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("VM %s: %s not reached within %s; last status %s", name, what, timeout, describe(s))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) eventsOf(name string, kind EventKind) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if strings.HasSuffix(e.VM, "/"+name) && (kind == "" || e.Event == kind) {
			out = append(out, e)
		}
	}
	return out
}

func describe(s *Snapshot) string {
	if s == nil {
		return "<none>"
	}
	fails := 0
	if s.VM.Status.StartFailure != nil {
		fails = s.VM.Status.StartFailure.ConsecutiveFailCount
	}
	phase := ""
	if s.VMI != nil {
		phase = string(s.VMI.Status.Phase)
	}
	return fmt.Sprintf("printable=%s attempt=%d fails=%d phase=%s", s.VM.Status.PrintableStatus, s.Attempt, fails, phase)
}

func failCountOf(s *Snapshot) int {
	if s.VM.Status.StartFailure == nil {
		return 0
	}
	return s.VM.Status.StartFailure.ConsecutiveFailCount
}

func tempDirs(t *testing.T) (state, manifests string) {
	d := t.TempDir()
	state, manifests = filepath.Join(d, "state"), filepath.Join(d, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	return state, manifests
}
