package memcg

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseOOMKills(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int
		ok         bool
	}{
		{"v1 oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"v2 events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", 1, true},
		{"none yet", "oom_kill 0\n", 0, true},
		{"no line", "low 0\nhigh 0\n", 0, false},
		{"not a number", "oom_kill many\n", 0, false},
		{"negative", "oom_kill -1\n", 0, false},
		{"oom_kill_disable is not the counter", "oom_kill_disable 1\n", 0, false},
	} {
		got, err := ParseOOMKills("memory.events", tc.text)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func TestCounterFileByHierarchy(t *testing.T) {
	v2 := t.TempDir()
	if got, want := CounterFile(v2, "machine.slice/x.scope"), filepath.Join(v2, "machine.slice/x.scope", "memory.events"); got != want {
		t.Errorf("unified: %s, want %s", got, want)
	}
	v1 := t.TempDir()
	if err := os.Mkdir(filepath.Join(v1, "memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := CounterFile(v1, "/libpod_parent/x"), filepath.Join(v1, "memory", "libpod_parent/x", "memory.oom_control"); got != want {
		t.Errorf("v1: %s, want %s", got, want)
	}
}

// The follower keeps the highest count and stops when the file goes,
// as a cgroup's does with its last process.
func TestFollowerKeepsTheMostUntilTheFileGoes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "memory.events")
	write := func(s string) {
		if err := os.WriteFile(file+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("oom_kill 0\n")
	f := Follow(context.Background(), file, time.Millisecond)
	write("oom_kill 2\n")
	deadline := time.After(10 * time.Second)
	for n, _ := f.Most(); n != 2; n, _ = f.Most() {
		select {
		case <-deadline:
			t.Fatalf("count %d, want 2", n)
		case <-time.After(time.Millisecond):
		}
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Done():
	case <-deadline:
		t.Fatal("the follower did not stop when the file went")
	}
	if n, read := f.Most(); n != 2 || !read {
		t.Fatalf("after the file went: %d, %v", n, read)
	}
}

// TestReadNow: a read between the follower's own (an hour apart here)
// keeps a higher count, and fails once the file is gone.
func TestReadNow(t *testing.T) {
	file := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(file, []byte("oom_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := Follow(ctx, file, time.Hour)
	if err := os.WriteFile(file, []byte("under_oom 0\noom_kill 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.ReadNow(); err != nil {
		t.Fatal(err)
	}
	if n, read := f.Most(); n != 3 || !read {
		t.Errorf("Most = %d, %v after ReadNow; want 3", n, read)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := f.ReadNow(); err == nil {
		t.Error("ReadNow of a gone file succeeded")
	}
	if n, _ := f.Most(); n != 3 {
		t.Errorf("Most = %d after the file went, want 3 kept", n)
	}
}
