package qemu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestCleanConsole(t *testing.T) {
	got := cleanConsole("c\x1b[?7l\x1b[2JHARNESS-GUEST-READY uptime=2.47\r")
	if got != "cHARNESS-GUEST-READY uptime=2.47" {
		t.Fatalf("cleanConsole = %q", got)
	}
}

func TestWatchConsoleFollowsAFileThatAppearsLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := WatchConsole(ctx, clk, path, time.Millisecond)
	if err := os.WriteFile(path, []byte("first\r\nsecond"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Millisecond)
	expectLine(t, clk, lines, "first")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(" half\nthird\n")
	f.Close()
	expectLine(t, clk, lines, "second half")
	expectLine(t, clk, lines, "third")
}

func expectLine(t *testing.T, clk *clocktesting.FakeClock, lines <-chan ConsoleLine, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-lines:
			if l.Text != want {
				t.Fatalf("line = %q, want %q", l.Text, want)
			}
			return
		case <-deadline:
			t.Fatalf("no line %q within 5s", want)
		case <-time.After(time.Millisecond):
			// The watcher waits on the fake ticker; advance it.
			clk.Step(time.Millisecond)
		}
	}
}
