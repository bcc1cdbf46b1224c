package qemu

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChildrenReapsOrphansAndLeavesExecChildren runs the reaper the way the
// launcher does: a subreaper that inherits a daemonized grandchild, while
// os/exec still waits for its own child.
func TestChildrenReapsOrphansAndLeavesExecChildren(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Skip(err)
	}
	c := NewChildren()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Run(ctx)

	// A shell that leaves two orphans behind: one watched, one not.
	cmd := exec.Command("sh", "-c", "sleep 0.2 & echo $!; sleep 0.3 & echo $!; exec sleep 0.4")
	out := &strings.Builder{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.Leave(cmd.Process.Pid)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "\n") < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	pids := strings.Fields(out.String())
	if len(pids) != 2 {
		t.Fatalf("want two orphan pids, got %q", out.String())
	}
	watched, _ := strconv.Atoi(pids[0])
	other, _ := strconv.Atoi(pids[1])
	select {
	case ws := <-c.Watch(watched):
		if !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("watched orphan: status %v", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watched orphan's exit was not delivered")
	}
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(other)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unwatched orphan %d was not reaped", other)
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-waited; err != nil {
		t.Errorf("os/exec's Wait of a child left alone: %v", err)
	}
}
