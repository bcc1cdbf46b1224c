// Package memcg reads the kernel's OOM-kill counter of a memory cgroup:
// "oom_kill N" in memory.oom_control of the v1 memory hierarchy, or in
// memory.events of the unified (v2) hierarchy. The counter goes with the
// cgroup when its last process ends, so whoever needs it follows it while
// the container runs.
package memcg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultRoot is where the cgroup hierarchies are mounted.
const DefaultRoot = "/sys/fs/cgroup"

// CounterFile is the file that counts OOM kills for the cgroup at path
// (as /proc/PID/cgroup or podman's State.CgroupPath names it) under root
// (DefaultRoot when empty): the v1 memory hierarchy's memory.oom_control
// when that hierarchy is mounted, else memory.events.
func CounterFile(root, path string) string {
	if root == "" {
		root = DefaultRoot
	}
	if fi, err := os.Stat(filepath.Join(root, "memory")); err == nil && fi.IsDir() {
		return filepath.Join(root, "memory", path, "memory.oom_control")
	}
	return filepath.Join(root, path, "memory.events")
}

// ReadOOMKills reads the "oom_kill N" line of a counter file.
func ReadOOMKills(file string) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("reading the OOM-kill counter: %w", err)
	}
	return ParseOOMKills(file, string(data))
}

// ParseOOMKills finds the "oom_kill N" line in the text of a counter file
// named file (for the error).
func ParseOOMKills(file, text string) (int, error) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s: oom_kill %q: want a count", file, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s has no oom_kill line", file)
}

// Follower reads a counter file every interval until the file is gone or
// its context ends, and keeps the highest count read.
type Follower struct {
	file string
	mu   sync.Mutex
	most int
	read bool
	done chan struct{}
}

// Follow starts reading file every interval.
func Follow(ctx context.Context, file string, interval time.Duration) *Follower {
	f := &Follower{file: file, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if f.ReadNow() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return f
}

// ReadNow reads the counter once more, between the follower's own
// reads (at a moment when the cgroup is known to exist), and keeps the
// count if it is the highest; an error when the file is gone.
func (f *Follower) ReadNow() error {
	n, err := ReadOOMKills(f.file)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.most, f.read = max(f.most, n), true
	f.mu.Unlock()
	return nil
}

// Most is the highest count read so far, and whether the file was read
// at all.
func (f *Follower) Most() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most, f.read
}

// Done is closed when the follower has stopped reading.
func (f *Follower) Done() <-chan struct{} { return f.done }
