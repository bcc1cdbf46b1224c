package clusterlite

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// groupMembers returns the PIDs of live processes in process group pgid.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold anything but ")".
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// awaitGroupGone waits up to d for process group pgid to have no live
// member (a process killed a moment ago may still be exiting) and returns
// the members left.
func awaitGroupGone(t *testing.T, pgid int, d time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m := groupMembers(t, pgid)
		if len(m) == 0 || time.Now().After(deadline) {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startShell starts sh -c script as a child through a new spawner, in dir
// and logging there.
func startShell(t *testing.T, dir, script string) *child {
	t.Helper()
	sp := spawn.New()
	t.Cleanup(sp.Close)
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err := startChild(sp, logger, "sh", "/bin/sh", []string{"-c", script}, dir, filepath.Join(dir, "sh.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) })
	return c
}

func TestChildStop(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		before       time.Duration // wait before stopping
		wantErr      string        // "" for no error
	}{
		{name: "terminates", script: "sleep 100 & wait"},
		{name: "ignores SIGTERM", script: `trap "" TERM; sleep 100 & wait`, wantErr: "still running 300ms after SIGTERM; killed"},
		{name: "fails on SIGTERM", script: `trap "echo bye; exit 7" TERM; while :; do sleep 0.05; done`, wantErr: "failed on SIGTERM: exit status 7"},
		{name: "exited before", script: "echo boom; exit 3", before: 300 * time.Millisecond, wantErr: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startShell(t, t.TempDir(), tc.script)
			pgid := c.cmd.Process.Pid
			time.Sleep(100*time.Millisecond + tc.before) // let the shell set its traps
			err := c.stop(context.Background(), 300*time.Millisecond)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("stop: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("stop: %v; want an error with %q", err, tc.wantErr)
			}
			if m := awaitGroupGone(t, pgid, 2*time.Second); len(m) != 0 {
				t.Errorf("processes %v of the group survive stop by 2s", m)
			}
		})
	}
}

func TestChildStopContext(t *testing.T) {
	c := startShell(t, t.TempDir(), `trap "" TERM; sleep 100`)
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := c.stop(ctx, time.Hour)
	if err == nil || !strings.Contains(err.Error(), "stop abandoned") {
		t.Errorf("stop: %v; want it abandoned", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("stop took %v despite the context", d)
	}
}

// TestChildDiesWithParent runs this test binary again as a parent that
// starts a child and is then killed with SIGKILL; the child must die too.
func TestChildDiesWithParent(t *testing.T) {
	// The parent dies by SIGKILL and cannot remove a t.TempDir of its own.
	if dir := os.Getenv("CLUSTERLITE_TEST_PARENT_DIR"); dir != "" {
		// exec: the parent-death signal reaches only the direct child.
		c := startShell(t, dir, "exec sleep 100")
		fmt.Println("child", c.cmd.Process.Pid)
		time.Sleep(time.Hour) // until killed
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithParent$")
	cmd.Env = append(os.Environ(), "CLUSTERLITE_TEST_PARENT_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var childPID int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "child %d", &childPID); err == nil {
			break
		}
	}
	if childPID == 0 {
		t.Fatal("parent never reported its child")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if m := awaitGroupGone(t, childPID, 5*time.Second); len(m) != 0 {
		_ = syscall.Kill(-childPID, syscall.SIGKILL)
		t.Fatalf("child %v outlived its killed parent by 5s", m)
	}
}

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var sb strings.Builder
	for i := range 100 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	if err := os.WriteFile(p, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(p, 2), "    line 98\n    line 99\n"; got != want {
		t.Errorf("logTail = %q, want %q", got, want)
	}
	if got := logTail(filepath.Join(t.TempDir(), "missing"), 2); !strings.Contains(got, "no such file") {
		t.Errorf("logTail of a missing file = %q", got)
	}
}
