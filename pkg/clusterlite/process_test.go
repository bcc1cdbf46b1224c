package clusterlite

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// startShell starts sh -c script as a child through a new spawner, in dir
// and logging there. pkg/spawn's tests check that nothing of the group
// survives a stop; these check what a stop reports.
func startShell(t *testing.T, dir, script string) *child {
	t.Helper()
	sp := spawn.New()
	t.Cleanup(sp.Close)
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err := startChild(sp, logger, "sh", "/bin/sh", []string{"-c", script}, dir, filepath.Join(dir, "sh.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.proc.PID(), syscall.SIGKILL) })
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
		{name: "fails on SIGTERM", script: `trap "echo bye; exit 7" TERM; while :; do sleep 0.05; done`, wantErr: "failed on SIGTERM: exit code 7"},
		{name: "exited before", script: "echo boom; exit 3", before: 300 * time.Millisecond, wantErr: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startShell(t, t.TempDir(), tc.script)
			time.Sleep(100*time.Millisecond + tc.before) // let the shell set its traps
			err := c.stop(context.Background(), 300*time.Millisecond)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("stop: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("stop: %v; want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestChildStopContext(t *testing.T) {
	c := startShell(t, t.TempDir(), `trap "" TERM; sleep 100`)
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.stop(ctx, time.Hour); err == nil || !strings.Contains(err.Error(), "stop abandoned") {
		t.Errorf("stop: %v; want it abandoned", err)
	}
}

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(p, 2), "    two\n    three\n"; got != want {
		t.Errorf("logTail = %q, want %q", got, want)
	}
	if got := logTail(filepath.Join(t.TempDir(), "missing"), 2); !strings.Contains(got, "no such file") {
		t.Errorf("logTail of a missing file = %q", got)
	}
}
