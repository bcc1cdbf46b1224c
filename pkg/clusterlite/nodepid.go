package clusterlite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// Reaching a process of the node namespace from the host, by PID: podman
// inside the node reports its containers' PIDs as the node's PID
// namespace numbers them, which name other processes (or nothing) on the
// host. A spec that kills virt-handler, or follows a launcher pod's QEMU,
// asks podman inside the node for the container's PID and maps it to the
// host's through /proc/<pid>/status (NSpid), never by a program's name.

// NodePID1File is the file in `clusterlite up`'s state folder that holds
// the host's PID of the node namespace's PID 1 (--node-side virt-handler
// only), so that whoever runs the stack can enter the node (nsenter -t) and
// find its containers' processes (ContainerPID).
const NodePID1File = "node-pid1"

// WritePID1 records the node namespace's PID 1 in dir/NodePID1File.
func (n *Node) WritePID1(dir string) error {
	path := filepath.Join(dir, NodePID1File)
	if err := os.WriteFile(path, []byte(strconv.Itoa(n.PID1())+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the node namespace's PID 1 to %s: %w", path, err)
	}
	return nil
}

// ReadNodePID1 reads the PID that WritePID1 recorded in dir and checks
// that it still names a process.
func ReadNodePID1(dir string) (int, error) {
	path := filepath.Join(dir, NodePID1File)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("the node namespace's PID 1 (written by clusterlite up --node-side virt-handler): %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: %q is not a PID above 1", path, strings.TrimSpace(string(b)))
	}
	if _, err := procfs.ReadStat(pid); err != nil {
		return 0, fmt.Errorf("%s: the node namespace's PID 1 %d: %w", path, pid, err)
	}
	return pid, nil
}

// NodeProcess is a process of the node namespace as the host sees it.
type NodeProcess struct {
	// PID is the host's PID, NodePID the node namespace's.
	PID, NodePID int
	// StartTicks tells the process apart from a later one that reuses
	// its PID (procfs.Stat.StartTicks).
	StartTicks uint64
}

// ContainerPID is the main process of container, a running container of
// the node namespace whose PID 1 is the host's pid1: podman inspect inside
// the node (its State.Pid, in the node's numbering), mapped to the host's
// PID by HostProcess.
func ContainerPID(ctx context.Context, pid1 int, container string) (NodeProcess, error) {
	argv := []string{"nsenter", "-t", strconv.Itoa(pid1), "-p", "-m", "-n", "--",
		"podman", "inspect", "--format", "{{.State.Status}} {{.State.Pid}}", container}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return NodeProcess{}, fmt.Errorf("podman inspect %s in the node namespace of PID 1 %d: %w: %s", container, pid1, err, strings.TrimSpace(string(out)))
	}
	status, pidText, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	nodePID, err := strconv.Atoi(pidText)
	if status != "running" || err != nil || nodePID <= 0 {
		return NodeProcess{}, fmt.Errorf("container %s in the node namespace: state %q, PID %q: want running with a PID", container, status, pidText)
	}
	return HostProcess(pid1, nodePID)
}

// HostProcess maps nodePID, a PID in the numbering of the node namespace
// whose PID 1 is the host's pid1, to the host's process: the descendant of
// pid1 whose NSpid (proc(5)) names nodePID at the node's level.
func HostProcess(pid1, nodePID int) (NodeProcess, error) {
	if nodePID == 1 {
		return stamp(NodeProcess{PID: pid1, NodePID: 1})
	}
	level, err := nsLevel(pid1)
	if err != nil {
		return NodeProcess{}, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return NodeProcess{}, fmt.Errorf("listing /proc: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pid1 {
			continue
		}
		ns, err := nsPIDs(pid)
		if err != nil || len(ns) <= level || ns[level] != nodePID || !descends(pid, pid1) {
			continue // gone meanwhile, or another namespace's
		}
		return stamp(NodeProcess{PID: pid, NodePID: nodePID})
	}
	return NodeProcess{}, fmt.Errorf("no process under the node namespace's PID 1 %d has node PID %d", pid1, nodePID)
}

// Alive reports whether p still runs: its PID names a process that has
// not ended, started at the same time.
func (p NodeProcess) Alive() bool {
	st, err := procfs.ReadStat(p.PID)
	return err == nil && !st.Gone() && st.StartTicks == p.StartTicks
}

// stamp adds p's start time.
func stamp(p NodeProcess) (NodeProcess, error) {
	st, err := procfs.ReadStat(p.PID)
	if err != nil {
		return NodeProcess{}, fmt.Errorf("process %d (node PID %d): %w", p.PID, p.NodePID, err)
	}
	p.StartTicks = st.StartTicks
	return p, nil
}

// nsLevel is the index, in a process's NSpid list, of the node
// namespace's numbers: where the node's PID 1 has 1.
func nsLevel(pid1 int) (int, error) {
	ns, err := nsPIDs(pid1)
	if err != nil {
		return 0, err
	}
	if len(ns) < 2 || ns[len(ns)-1] != 1 {
		return 0, fmt.Errorf("process %d is not PID 1 of a PID namespace (NSpid %v)", pid1, ns)
	}
	return len(ns) - 1, nil
}

// nsPIDs is a process's NSpid line: its PID in its own PID namespace and
// every ancestor namespace up to this /proc's, outermost first.
func nsPIDs(pid int) ([]int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	return parseNSpid(string(b))
}

// parseNSpid reads the NSpid line of a /proc/<pid>/status text.
func parseNSpid(status string) ([]int, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(rest) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("NSpid %q: %w", strings.TrimSpace(rest), err)
			}
			pids = append(pids, n)
		}
		if len(pids) == 0 {
			return nil, fmt.Errorf("empty NSpid line")
		}
		return pids, nil
	}
	return nil, fmt.Errorf("no NSpid line (kernel before 4.1?)")
}

// descends reports whether pid is a descendant of ancestor, following
// parents up to PID 1 of this /proc.
func descends(pid, ancestor int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		st, err := procfs.ReadStat(pid)
		if err != nil {
			return false
		}
		if st.PPID == ancestor {
			return true
		}
		pid = st.PPID
	}
	return false
}

// Descendants lists the host's PIDs of every live process below pid.
func Descendants(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing /proc: %w", err)
	}
	var pids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if st, err := procfs.ReadStat(p); err == nil && !st.Gone() && descends(p, pid) {
			pids = append(pids, p)
		}
	}
	return pids, nil
}
