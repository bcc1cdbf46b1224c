package watchdog

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeWatchdog is a script that behaves as the watchdog's pipe protocol
// says: it exits 0 on a "done" line and 3 on EOF without one, and writes
// its arguments to a file.
func fakeWatchdog(t *testing.T) (exe, argsFile string) {
	dir := t.TempDir()
	exe, argsFile = filepath.Join(dir, "watchdog"), filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\nwhile read -r line; do [ \"$line\" = done ] && exit 0; done\nexit 3\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe, argsFile
}

func TestClientDone(t *testing.T) {
	exe, argsFile := fakeWatchdog(t)
	c, err := Start(exe, Target{Domain: "ns_vmi", Root: "/run/x/vmi-1", URI: ""}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Done(); err != nil {
		t.Fatalf("Done: %v", err)
	}
	args, _ := os.ReadFile(argsFile)
	if got := strings.TrimSpace(string(args)); got != Flag+" ns_vmi /run/x/vmi-1" {
		t.Errorf("watchdog arguments %q", got)
	}
}

func TestHandoffAndAdopt(t *testing.T) {
	exe, _ := fakeWatchdog(t)
	c, err := Start(exe, Target{Domain: "d", Root: "/r"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := c.Handoff()
	if err != nil {
		t.Fatal(err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Fatalf("after Handoff the pipe's flags are %#x (err %v): want it kept open across exec", flags, err)
	}
	adopted, err := Adopt(c.PID(), fd)
	if err != nil {
		t.Fatal(err)
	}
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
		t.Error("an adopted pipe stays open across the next exec: want close-on-exec again")
	}
	if err := adopted.Done(); err != nil {
		t.Fatalf("Done of the adopted watchdog: %v", err)
	}
	runtime.KeepAlive(c)
}

func TestAdoptRefusesWhatIsNotItsPipe(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-pipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		name    string
		pid, fd int
	}{
		{"no PID", 0, int(f.Fd())},
		{"no descriptor", os.Getpid(), -1},
		{"a regular file", os.Getpid(), int(f.Fd())},
		{"a closed descriptor", os.Getpid(), 1000},
	} {
		if _, err := Adopt(c.pid, c.fd); err == nil {
			t.Errorf("%s: Adopt(%d, %d) succeeded, want an error", c.name, c.pid, c.fd)
		}
	}
}

func TestDoneReportsAWatchdogThatFailed(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Start(exe, Target{Domain: "d"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Done(); err == nil || !strings.Contains(err.Error(), "exit status 4") {
		t.Fatalf("Done of a watchdog that exited 4: got %v", err)
	}
}
