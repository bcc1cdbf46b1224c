package controller

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

func TestFindCPUCgroup(t *testing.T) {
	const (
		v1Mounts = `25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:7 - cgroup2 cgroup2 rw,nsdelegate
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:10 - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory
`
		v2Mounts = `25 24 0:22 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	)
	for _, tc := range []struct {
		name, self, mounts string
		version            int
		dir, err           string
	}{
		{name: "v1 hybrid, root", self: "4:memory:/x\n2:cpu,cpuacct:/\n0::/\n", mounts: v1Mounts,
			version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct"},
		{name: "v1 nested", self: "2:cpu,cpuacct:/ci/job-7\n0::/\n", mounts: v1Mounts,
			version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct/ci/job-7"},
		{name: "v1 container mount root", self: "2:cpu,cpuacct:/docker/abc/sub\n", mounts: strings.Replace(v1Mounts, "0:26 / ", "0:26 /docker/abc ", 1),
			version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct/sub"},
		{name: "v1 outside mount root", self: "2:cpu,cpuacct:/other\n", mounts: strings.Replace(v1Mounts, "0:26 / ", "0:26 /docker/abc ", 1),
			err: "outside"},
		{name: "v1 not mounted", self: "2:cpu,cpuacct:/\n", mounts: v2Mounts, err: "not mounted"},
		{name: "v2", self: "0::/user.slice/session-1.scope\n", mounts: v2Mounts,
			version: 2, dir: "/sys/fs/cgroup/user.slice/session-1.scope"},
		{name: "none", self: "", mounts: "", err: "no cgroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, dir, err := findCPUCgroup([]byte(tc.self), []byte(tc.mounts))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q (got v%d %s)", err, tc.err, v, dir)
				}
				return
			}
			if err != nil || v != tc.version || dir != tc.dir {
				t.Fatalf("got v%d %q, %v; want v%d %q", v, dir, err, tc.version, tc.dir)
			}
		})
	}
}

func TestV1Shares(t *testing.T) {
	for w, want := range map[int]int{1: 10, 100: 1024, 10000: 102400, 0: 2} {
		if got := v1Shares(w); got != want {
			t.Errorf("v1Shares(%d) = %d, want %d", w, got, want)
		}
	}
}

// TestLauncherCgroup puts a real process into a real launcher cgroup and
// removes the cgroup; it is skipped where no cgroup can be made (not root,
// no cpu controller).
func TestLauncherCgroup(t *testing.T) {
	name := launcherCgroupName(t.TempDir())
	g, err := openLauncherCgroup(name, 1)
	if err != nil {
		t.Skipf("no launcher cgroup here: %v", err)
	}
	defer g.Close()
	var warned []any
	g.warn = func(msg string, args ...any) { warned = append(warned, msg) }
	// A leftover cgroup of the same name (a killed controller's) is reused.
	again, err := openLauncherCgroup(name, 1)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	if again.dir != g.dir {
		t.Fatalf("reopened %s, want %s", again.dir, g.dir)
	}
	again.closeFiles()

	p, err := spawn.Start(spawn.Spec{Path: "sleep", Args: []string{"30"}, Starter: g.start})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	// On v1 the launcher moves itself in first thing (through sh), so the
	// move may lag Start by a moment.
	var procs []byte
	in := false
	for deadline := time.Now().Add(5 * time.Second); !in && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		procs, _ = os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(procs)) {
			in = in || f == strconv.Itoa(pid)
		}
	}
	// It became the command itself, with the same PID.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
	}
	if comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); strings.TrimSpace(string(comm)) != "sleep" {
		t.Errorf("pid %d is %q, want sleep", pid, comm)
	}
	// While it runs the cgroup cannot go.
	busy := syscall.Rmdir(g.dir)
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
	if !in || len(warned) > 0 {
		t.Errorf("pid %d in %s: %v (cgroup.procs %q, warnings %v)", pid, g, in, procs, warned)
	}
	if !errors.Is(busy, syscall.EBUSY) {
		t.Errorf("rmdir of a cgroup with a process in it: %v, want EBUSY", busy)
	}
	start := time.Now()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after Close (%v, after %s)", g.dir, err, time.Since(start))
	}
}
