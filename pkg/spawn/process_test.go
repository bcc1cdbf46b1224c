package spawn

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/procfs"
	"github.com/crashloop-harness/crashloop/pkg/procfs/procfstest"
)

// startShell starts sh -c script as a group child through a new spawner,
// logging into dir.
func startShell(t *testing.T, dir, script string) *Process {
	t.Helper()
	sp := New()
	t.Cleanup(sp.Close)
	log := filepath.Join(dir, "sh.log")
	p, err := sp.Start(Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: dir, StdoutFile: log, StderrFile: log, Group: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-p.PID(), syscall.SIGKILL) })
	return p
}

func TestStop(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		before       time.Duration // wait before stopping
		want         Stopped
	}{
		{name: "terminates", script: "sleep 100 & wait", want: Stopped{Exit: Exit{Code: 128 + 15, Signal: syscall.SIGTERM}}},
		{name: "ignores SIGTERM", script: `trap "" TERM; sleep 100 & wait`,
			want: Stopped{Exit: Exit{Code: 128 + 9, Signal: syscall.SIGKILL}, Killed: true, Why: "still running 300ms after SIGTERM"}},
		{name: "fails on SIGTERM", script: `trap "echo bye; exit 7" TERM; while :; do sleep 0.05; done`, want: Stopped{Exit: Exit{Code: 7}}},
		{name: "exited before", script: "echo boom; exit 3", before: 300 * time.Millisecond, want: Stopped{Exit: Exit{Code: 3}, Already: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startShell(t, t.TempDir(), tc.script)
			time.Sleep(100*time.Millisecond + tc.before) // let the shell set its traps
			got, err := p.Stop(context.Background(), 300*time.Millisecond)
			if err != nil || got != tc.want {
				t.Errorf("Stop = %+v, %v; want %+v", got, err, tc.want)
			}
			if m := procfstest.AwaitGroupGone(t, p.PID(), 2*time.Second); len(m) != 0 {
				t.Errorf("processes %v of the group survive Stop by 2s", m)
			}
		})
	}
}

func TestStopContext(t *testing.T) {
	p := startShell(t, t.TempDir(), `trap "" TERM; sleep 100`)
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	got, err := p.Stop(ctx, time.Hour)
	if err != nil || !got.Killed || !strings.Contains(got.Why, "stop abandoned") {
		t.Errorf("Stop = %+v, %v; want it abandoned", got, err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Stop took %v despite the context", d)
	}
}

// TestChildDiesWithParent runs this test binary again as a parent that
// starts a child through a Spawner and is then killed with SIGKILL; the
// child must die too.
func TestChildDiesWithParent(t *testing.T) {
	// The parent dies by SIGKILL and cannot remove a t.TempDir of its own.
	if dir := os.Getenv("SPAWN_TEST_PARENT_DIR"); dir != "" {
		// exec: the parent-death signal reaches only the direct child.
		p := startShell(t, dir, "exec sleep 100")
		fmt.Println("child", p.PID())
		time.Sleep(time.Hour) // until killed
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithParent$")
	cmd.Env = append(os.Environ(), "SPAWN_TEST_PARENT_DIR="+t.TempDir())
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
	if m := procfstest.AwaitGroupGone(t, childPID, 5*time.Second); len(m) != 0 {
		_ = syscall.Kill(-childPID, syscall.SIGKILL)
		t.Fatalf("child %v outlived its killed parent by 5s", m)
	}
}

func TestOutputsAndExit(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", `echo "$X" out; echo err >&2; kill -USR1 $$`},
		Env: []string{"X=hello"}, Stdout: &out, StderrFile: filepath.Join(dir, "err.log"), Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if e := p.Exit(); e.Code != 128+int(syscall.SIGUSR1) || e.Signal != syscall.SIGUSR1 || e.String() != "killed by signal user defined signal 1" {
		t.Errorf("Exit = %+v (%s)", e, e)
	}
	if out.String() != "hello out\n" {
		t.Errorf("stdout %q", out.String())
	}
	if lines, err := Tail(filepath.Join(dir, "err.log"), 5); err != nil || len(lines) != 1 || lines[0] != "err" {
		t.Errorf("Tail = %q, %v", lines, err)
	}
	if _, err := Start(Spec{Path: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Start of a missing program: %v", err)
	}
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var sb strings.Builder
	for i := range 100 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	if err := os.WriteFile(p, []byte(sb.String()+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Tail(p, 2); err != nil || strings.Join(got, "|") != "line 98|line 99" {
		t.Errorf("Tail = %q, %v", got, err)
	}
	if _, err := Tail(filepath.Join(t.TempDir(), "missing"), 2); err == nil {
		t.Error("Tail of a missing file did not fail")
	}
}

// TestStartTicksOfAnEndedChild: a child that has exited and been reaped
// still has the start time read before its reaper ran, while /proc no
// longer has it to read (what launchrt's Ref of a launcher that failed at
// once used to miss).
func TestStartTicksOfAnEndedChild(t *testing.T) {
	for i := 0; i < 20; i++ {
		p, err := Start(Spec{Path: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		if p.StartTicks() == 0 {
			t.Fatalf("run %d: an ended child's StartTicks is 0", i)
		}
		// What reading /proc after the reaper found: nothing, or a
		// process that reused the PID.
		if st, err := procfs.ReadStat(p.PID()); err == nil && st.StartTicks == p.StartTicks() {
			t.Fatalf("run %d: pid %d still in /proc after it was reaped", i, p.PID())
		}
	}
	self, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Spec{Path: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.StartTicks() < self.StartTicks {
		t.Fatalf("child's StartTicks %d before this test's own %d", p.StartTicks(), self.StartTicks)
	}
}
