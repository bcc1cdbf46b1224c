package clusterlite

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// fakeControlPlane is enough of a control plane for StartProcess: a
// spawner, a state folder and a fake clock.
func fakeControlPlane(t *testing.T) (*ControlPlane, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	sp := spawn.New()
	t.Cleanup(sp.Close)
	return &ControlPlane{cfg: Config{StateDir: state, StopTimeout: 5 * time.Second, Clock: clk},
		log: slog.New(slog.NewTextHandler(t.Output(), nil)), spawner: sp}, clk
}

// awaitWaiter waits until the restarter waits on the fake clock for d.
func awaitWaiter(t *testing.T, clk *clocktesting.FakeClock, p *Process, runs int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() || len(p.PIDs()) != runs {
		if time.Now().After(deadline) {
			t.Fatalf("no restart wait after %d runs (runs %d)", runs, len(p.PIDs()))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRestartBackoff runs a process that fails at once: it is started
// again after 1 s, 2 s, 4 s, then 4 s (the maximum), never earlier.
func TestRestartBackoff(t *testing.T) {
	cp, clk := fakeControlPlane(t)
	p, err := cp.StartProcess("fails", "/bin/sh", []string{"-c", "exit 3"}, Restart(Backoff{Initial: time.Second, Max: 4 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		awaitWaiter(t, clk, p, i+1)
		clk.Step(want - time.Millisecond)
		if len(p.PIDs()) != i+1 || !clk.HasWaiters() {
			t.Fatalf("run %d restarted before %v", i+2, want)
		}
		clk.Step(time.Millisecond)
	}
	awaitWaiter(t, clk, p, 5)
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("stop while waiting to restart: %v", err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("not done after Stop")
	}
	if n := len(p.PIDs()); n != 5 {
		t.Errorf("%d runs, want 5 (none after Stop)", n)
	}
}

// TestNoRestart: without Restart, a process that exits is done.
func TestNoRestart(t *testing.T) {
	cp, _ := fakeControlPlane(t)
	p, err := cp.StartProcess("once", "/bin/sh", []string{"-c", "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done 10 s after it exited")
	}
	if p.Err() == nil || len(p.PIDs()) != 1 {
		t.Errorf("err %v, runs %d; want the exit and one run", p.Err(), len(p.PIDs()))
	}
	if _, err := cp.StartProcess("bad", "/bin/true", nil, Restart(Backoff{})); err == nil {
		t.Error("a zero backoff was accepted")
	}
}
