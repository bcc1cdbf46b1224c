package launchrt

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The process runtime's tests run real short processes (sh, sleep), as
// pkg/spawn's do; its users' unit tests run on a fake Runtime.

func TestStartExitAndRef(t *testing.T) {
	var out strings.Builder
	l, err := Process{}.Start(context.Background(), Spec{Path: "/bin/sh", Args: []string{"-c", "echo hi; exit 3"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if e := l.Exit(); e.Code != 3 || e.Reason != ReasonError || e.String() != "exit code 3" {
		t.Errorf("Exit = %+v (%s)", e, e)
	}
	if out.String() != "hi\n" || l.Ref().PID <= 0 || l.Ref().StartTicks == 0 {
		t.Errorf("stdout %q, ref %+v", out.String(), l.Ref())
	}
	if l.Ref().Alive() {
		t.Error("an ended launcher's ref is alive")
	}
	if _, err := (Process{}).Start(context.Background(), Spec{Path: "/nonexistent/virt-launcher"}); err == nil {
		t.Error("Start of a missing binary succeeded")
	}
}

// TestAdopt adopts a process started by another runtime value (as a
// restarted controller does) and stops it through the adopted handle.
func TestAdopt(t *testing.T) {
	first, err := Process{}.Start(context.Background(), Spec{Path: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Signal(syscall.SIGKILL) })
	ref := first.Ref()
	if !ref.Alive() {
		t.Fatalf("ref %+v of a running sleep is not alive", ref)
	}
	if (Ref{PID: ref.PID, StartTicks: ref.StartTicks + 1}).Alive() {
		t.Error("a ref with another start time is alive: a reused PID would be mistaken for the launcher")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := Process{Poll: 5 * time.Millisecond}.Adopt(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if a.Ref() != ref || a.Exit() != (Exit{}) {
		t.Errorf("adopted ref %+v, exit %+v", a.Ref(), a.Exit())
	}
	killed, err := a.Stop(context.Background(), 5*time.Second)
	if err != nil || killed {
		t.Fatalf("Stop = %v, %v; want a SIGTERM to end it", killed, err)
	}
	if e := a.Exit(); e.Code != -1 || !strings.Contains(e.String(), "exit code unknown") {
		t.Errorf("adopted exit %+v (%s), want the code unknown", e, e)
	}
	<-first.Done() // the real parent sees the signal
	if e := first.Exit(); e.Signal != syscall.SIGTERM {
		t.Errorf("the process ended with %+v, want SIGTERM", e)
	}
	if err := a.Signal(syscall.SIGTERM); err == nil {
		t.Error("Signal to a gone launcher succeeded")
	}
	gone, err := Process{}.Adopt(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone.Done():
	default:
		t.Error("adopting a gone process: not Done at once")
	}
	if _, err := (Process{}).Adopt(ctx, Ref{}); err == nil {
		t.Error("adopting pid 0 succeeded")
	}
}

func TestNiceAndEnv(t *testing.T) {
	dir := t.TempDir()
	l, err := Process{}.Start(context.Background(), Spec{Path: "/bin/sh", Args: []string{"-c", `echo "$X $(nice)" > out`},
		Env: []string{"X=hello"}, Dir: dir, Nice: 5})
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	data, _ := os.ReadFile(dir + "/out")
	if strings.TrimSpace(string(data)) != "hello 5" {
		t.Errorf("out %q, want the environment and nice 5", data)
	}
}
