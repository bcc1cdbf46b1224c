package controller

// Launchers run in a CPU cgroup of their own with a low weight, the way a
// node keeps virt-controller and the launcher pods apart. nice does not do
// this: CFS weights are per task, so a thousand runnable nice-10 launchers
// still outweigh the controller's few threads, and the controller's timers
// fire seconds late while a crowd of launchers starts. A cgroup's weight
// is shared by everything in it, so the launchers together weigh as little
// as one low-weight task whenever a controller thread is runnable, and they
// still get every idle cycle.
//
// Measured with the 1000-VM benchmark on cgroup v1 (kernel 6.18, 2 CPUs):
// the controller's timers then fire on time (p99 13-17 ms at time scales
// 1.0 to 0.2), but moving launchers into the cgroup one by one, hundreds a
// second, stalls the machine: a move takes the kernel's global
// threadgroup lock for writing, every fork, exec and exit waits behind it,
// the controller piles up a thousand threads blocked in fork and wait,
// and launchers stop making progress (200 of 1100 exited in a minute).
// Moving from the controller after Start and moving itself through sh
// (below) both do it. So the controller's default is no cgroup; on cgroup
// v2 launchers are born in it (CLONE_INTO_CGROUP, no move), which avoids
// that lock, but no v2 machine with the cpu controller was at hand to
// measure it.
//
// This is ~150 lines against cgroupfs rather than
// github.com/containers/common/pkg/cgroups, because that package does not
// fit the job: on v1 it creates the cgroup in every hierarchy (cpu, cpuset,
// memory, pids, blkio and the rest) at a path from the hierarchy root and
// writes each PID into all of them, on v2 it enables every available
// controller along the path, it offers no placement at fork
// (CLONE_INTO_CGROUP), and it brings runc's libcontainer, godbus,
// go-systemd, containers/storage and logrus with it. We need one knob of
// one controller, for a cgroup placed beside our own.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// launcherCgroup is the CPU cgroup every launcher of one controller runs
// in (and its QEMU, unless libvirt moves QEMU into a cgroup of its own).
//
// On cgroup v1 it is a child of the controller's own cpu cgroup, weighted
// by cpu.shares, and a launcher moves itself into it before it becomes the
// launcher (see start). On cgroup v2 it is placed at fork through
// CLONE_INTO_CGROUP and weighted by cpu.weight; because v2 forbids
// processes in a cgroup whose children use the cpu controller, it is a
// sibling of the controller's cgroup (a child when the controller is in
// the root cgroup).
//
// Its name comes from the state folder, so a controller that was killed
// and started again reuses the cgroup it left behind, with the launchers
// it adopts still in it.
type launcherCgroup struct {
	version int    // 1 or 2
	dir     string // the cgroup's folder in cgroupfs
	setting string // "cpu.shares=N" or "cpu.weight=N", for messages
	procs   *os.File
	dirFD   *os.File
	sh      string // v1: sh, to start launchers through joinScript
	// warn reports the first failure to place a launcher; launchers run
	// anyway.
	warn   func(msg string, args ...any)
	warned atomic.Bool
}

// launcherCgroupName is the cgroup's name for the state folder dir.
func launcherCgroupName(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sum := sha256.Sum256([]byte(dir))
	return "crashloop-launchers-" + hex.EncodeToString(sum[:4])
}

// v1Shares converts a cgroup v2 cpu.weight (1..10000, default 100) into v1
// cpu.shares (2..262144, default 1024), keeping the default the default.
func v1Shares(weight int) int { return min(max(weight*1024/100, 2), 262144) }

// openLauncherCgroup creates (or reuses) the launcher cgroup called name
// with the given cpu.weight. An error says why it cannot be used; the
// controller then runs launchers without it.
func openLauncherCgroup(name string, weight int) (*launcherCgroup, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	version, own, err := findCPUCgroup(self, mounts)
	if err != nil {
		return nil, err
	}
	g := &launcherCgroup{version: version}
	parent := own
	if version == 2 {
		if !hasWord(own, "cgroup.controllers", "cpu") {
			return nil, fmt.Errorf("cgroup v2: the cpu controller is not enabled for %s", own)
		}
		if _, err := os.Stat(filepath.Join(own, "..", "cgroup.controllers")); err == nil {
			parent = filepath.Dir(own) // not the root: go beside our cgroup
		} else if !hasWord(own, "cgroup.subtree_control", "cpu") {
			if err := os.WriteFile(filepath.Join(own, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
				return nil, fmt.Errorf("cgroup v2: enabling cpu for children of %s: %w", own, err)
			}
		}
	}
	g.dir = filepath.Join(parent, name)
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating cgroup: %w", err)
	}
	file, value := "cpu.weight", weight
	if version == 1 {
		file, value = "cpu.shares", v1Shares(weight)
	}
	g.setting = file + "=" + strconv.Itoa(value)
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(strconv.Itoa(value)), 0o644); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("setting %s: %w", g.setting, err)
	}
	if version == 1 {
		g.sh, _ = exec.LookPath("sh")
		g.procs, err = os.OpenFile(filepath.Join(g.dir, "cgroup.procs"), os.O_WRONLY, 0)
	} else {
		g.dirFD, err = os.Open(g.dir)
	}
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// String describes the cgroup for log lines.
func (g *launcherCgroup) String() string {
	return fmt.Sprintf("%s (cgroup v%d, %s)", g.dir, g.version, g.setting)
}

// joinScript is what a v1 launcher runs first, through sh: it moves itself
// into the cgroup ($0 is its cgroup.procs) and becomes the launcher.
const joinScript = `echo $$ >"$0" || echo "virt-controller: this launcher runs outside its CPU cgroup $0" >&2; exec "$@"`

// start starts cmd inside the cgroup. On v2 it is born there
// (CLONE_INTO_CGROUP). On v1 it is started through sh, which writes its
// own PID into cgroup.procs and execs the launcher, so a launcher never
// runs its start-up (Go runtime, libvirt's shared libraries) beside the
// controller: moving it from the controller after Start depends on the
// controller getting the CPU first, and when hundreds of launchers start
// at once it does not, which lets still more launchers run at full weight.
// Without sh the controller moves the launcher right after Start. A
// launcher that cannot be placed runs outside the cgroup (reported once,
// or in its log), never not at all: the command that was started is
// returned.
// It is a spawn.Spec.Starter: like makes the command to start instead.
func (g *launcherCgroup) start(cmd *exec.Cmd, like func(path string, args ...string) *exec.Cmd) (*exec.Cmd, error) {
	switch {
	case g.dirFD != nil:
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(g.dirFD.Fd())
		err := cmd.Start()
		if err == nil {
			return cmd, nil
		}
		g.report(fmt.Errorf("starting in %s: %w", g.dir, err))
		// A Cmd is not started twice: the same command, without the cgroup.
		again := like(cmd.Path, cmd.Args[1:]...)
		return again, again.Start()
	case g.sh != "":
		wrapped := like(g.sh, append([]string{"-c", joinScript, filepath.Join(g.dir, "cgroup.procs"), cmd.Path}, cmd.Args[1:]...)...)
		return wrapped, wrapped.Start()
	}
	if err := cmd.Start(); err != nil {
		return cmd, err
	}
	// cgroup.procs takes one PID per write; a launcher that is already gone
	// is no failure.
	if _, err := g.procs.WriteString(strconv.Itoa(cmd.Process.Pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
		g.report(fmt.Errorf("moving launcher pid %d into %s: %w", cmd.Process.Pid, g.dir, err))
	}
	return cmd, nil
}

func (g *launcherCgroup) report(err error) {
	if g.warn != nil && !g.warned.Swap(true) {
		g.warn("a launcher runs outside the launcher cgroup (reported once)", "err", err)
	}
}

// Close removes the cgroup. It waits a little for the last launchers to
// leave it and keeps it when some are still there (left running for the
// next controller, which reuses it).
func (g *launcherCgroup) Close() error {
	if g == nil {
		return nil
	}
	g.closeFiles()
	var err error
	for range 20 {
		if err = syscall.Rmdir(g.dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", g.dir, err)
}

func (g *launcherCgroup) closeFiles() {
	for _, f := range []*os.File{g.procs, g.dirFD} {
		if f != nil {
			_ = f.Close()
		}
	}
	g.procs, g.dirFD = nil, nil
}

// findCPUCgroup finds the folder of this process's cgroup in the
// hierarchy that has the cpu controller, from /proc/self/cgroup and
// /proc/self/mountinfo. A v1 cpu hierarchy wins over a v2 mount (hybrid
// setups mount cgroup2 with no controllers beside v1).
func findCPUCgroup(self, mountinfo []byte) (version int, dir string, err error) {
	var v1Path, v2Path string
	found2 := false
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, found2 = parts[2], true
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				v1Path = parts[2]
			}
		}
	}
	var root2, mount2 string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		root, mountpoint, fstype := fields[3], fields[4], fields[sep+1]
		switch fstype {
		case "cgroup":
			if v1Path == "" {
				continue
			}
			for _, o := range strings.Split(fields[sep+3], ",") {
				if o == "cpu" {
					return within(1, root, mountpoint, v1Path)
				}
			}
		case "cgroup2":
			if root2 == "" {
				root2, mount2 = root, mountpoint
			}
		}
	}
	if v1Path != "" {
		return 0, "", fmt.Errorf("cgroup v1 cpu hierarchy is not mounted here")
	}
	if found2 && mount2 != "" {
		return within(2, root2, mount2, v2Path)
	}
	return 0, "", errors.New("no cgroup v1 cpu hierarchy and no cgroup v2 mount")
}

// within maps a cgroup path onto a mount of its hierarchy whose root is
// root.
func within(version int, root, mountpoint, path string) (int, string, error) {
	rel, ok := strings.CutPrefix(path, root)
	if root == "/" {
		rel, ok = path, true
	}
	if !ok || (rel != "" && rel[0] != '/') {
		return 0, "", fmt.Errorf("our cgroup %s is outside the mounted part %s of the hierarchy", path, root)
	}
	return version, filepath.Join(mountpoint, rel), nil
}

// hasWord reports whether the space-separated file dir/name holds word.
func hasWord(dir, name, word string) bool {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return false
	}
	for _, w := range strings.Fields(string(data)) {
		if w == word {
			return true
		}
	}
	return false
}
