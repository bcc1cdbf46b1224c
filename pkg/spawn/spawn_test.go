package spawn

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// startFromDyingThread starts cmd from a goroutine locked to its own
// thread that then exits, which makes the runtime end that thread: the
// case in which a parent-death signal tied to the forking thread fires
// although the process lives on.
func startFromDyingThread(start func(*exec.Cmd) error, cmd *exec.Cmd) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		done <- start(cmd)
	}()
	return <-done
}

func sleeper() *exec.Cmd {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// alive reports whether cmd is still running after a while.
func alive(t *testing.T, cmd *exec.Cmd) bool {
	t.Helper()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-exited:
		return false
	case <-time.After(500 * time.Millisecond):
		_ = cmd.Process.Kill()
		<-exited
		return true
	}
}

func TestChildOutlivesTheThreadThatAskedForIt(t *testing.T) {
	// The control: started directly from the dying thread, the child is
	// killed when that thread ends.
	direct := sleeper()
	if err := startFromDyingThread((*exec.Cmd).Start, direct); err != nil {
		t.Fatal(err)
	}
	if alive(t, direct) {
		t.Skip("this kernel or runtime did not end the locked thread; nothing to compare")
	}

	s := New()
	defer s.Close()
	through := sleeper()
	if err := startFromDyingThread(s.startCmd, through); err != nil {
		t.Fatal(err)
	}
	if !alive(t, through) {
		t.Fatal("a child started through the spawner died with the thread of the goroutine that asked for it")
	}
}

func TestStartAfterClose(t *testing.T) {
	s := New()
	s.Close()
	if _, err := s.Start(Spec{Path: "true"}); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}
