package clusterlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The node namespace: with KubeVirt's own virt-handler, cluster-lite's
// node gets a PID and a mount namespace of its own whose PID 1 is ours
// (NodeInit), because virt-handler reaches its node through PID 1
// (/proc/1/ns/mnt, /proc/1/root) and on these machines the host's PID 1
// denies that even to root (tools/clusterlite/kubevirt/VIRT-HANDLER.md,
// run 2). podman, and so virt-handler and the launcher pods' containers,
// run inside it; everything outside drives them through Node.Command,
// never through the host's podman, whose view of their PIDs is wrong.

// NodeInitCommand is the hidden clusterlite command whose process is the
// node namespace's PID 1 (cmd/clusterlite runs NodeInit for it).
const NodeInitCommand = "node-init"

// Node is a running node namespace.
type Node struct {
	// Dir is the node's folder: KubeletDir and the stack's network
	// namespace file NetNS live under it.
	Dir string
	cmd *exec.Cmd
	log *slog.Logger
	// exited is closed once PID 1 has been waited for.
	exited chan struct{}
}

// KubeletDir is the node's kubelet root (kubelet's /var/lib/kubelet).
// The node folder is a shared mount inside the node namespace, so that
// podman's rshared and virt-handler's Bidirectional mounts, and the
// rslave mounts of the launcher pods, propagate.
func (n *Node) KubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

// PodsDir is kubelet's pods folder, <KubeletDir>/pods.
func (n *Node) PodsDir() string { return filepath.Join(n.KubeletDir(), "pods") }

// NetNS is a file, valid only inside the node namespace, bound to the
// stack's network namespace: the host's /proc/PID path of that namespace
// names nothing under the node's own /proc.
func (n *Node) NetNS() string { return filepath.Join(n.Dir, "netns") }

// PID1 is the host's PID of the node namespace's PID 1.
func (n *Node) PID1() int { return n.cmd.Process.Pid }

// Command is the command line that runs argv inside the node namespace.
func (n *Node) Command(argv ...string) []string {
	// -n: the node's network namespace, which is the host's (PID 1
	// stays there); the caller may be in the stack's, and runc refuses
	// a container in its own caller's namespace as "the host's".
	return append([]string{"nsenter", "-t", strconv.Itoa(n.PID1()), "-p", "-m", "-n", "--"}, argv...)
}

// Run runs argv inside the node namespace to completion and returns its
// combined output.
func (n *Node) Run(ctx context.Context, argv ...string) (string, error) {
	c := n.Command(argv...)
	out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("in the node namespace, %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// StartNode starts the node namespace: self (this program, which must run
// NodeInit for NodeInitCommand) as PID 1 of a new PID and mount namespace,
// which dies with the caller (SIGKILL on its death). netns is the host's
// path of the stack's network namespace. It returns once PID 1 has set up
// its mounts.
func StartNode(ctx context.Context, self, dir, netns string, log *slog.Logger) (*Node, error) {
	n := &Node{Dir: dir, log: log}
	for _, d := range []string{n.PodsDir(), filepath.Join(n.KubeletDir(), "device-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating the node's folder %s: %w", d, err)
		}
	}
	if err := os.WriteFile(n.NetNS(), nil, 0o644); err != nil {
		return nil, fmt.Errorf("creating the node's netns file: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	defer r.Close()
	logFile, err := os.Create(filepath.Join(dir, "node-init.log"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("node namespace log: %w", err)
	}
	defer logFile.Close()
	n.cmd = exec.Command(self, NodeInitCommand, dir, netns)
	n.cmd.Stdout, n.cmd.Stderr, n.cmd.ExtraFiles = logFile, logFile, []*os.File{w}
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	err = n.start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the node namespace (clone CLONE_NEWPID|CLONE_NEWNS, root needed): %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 64)
		k, _ := r.Read(b)
		if strings.TrimSpace(string(b[:k])) == "ready" {
			ready <- nil
			return
		}
		ready <- fmt.Errorf("the node namespace's PID 1 did not start: %s", tailOf(logFile.Name()))
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(30 * time.Second):
		err = errors.New("the node namespace's PID 1 was not ready after 30 s")
	}
	if err != nil {
		_ = n.cmd.Process.Kill()
		<-n.exited
		return nil, err
	}
	log.Info("node namespace ready", "pid1", n.PID1(), "dir", dir)
	return n, nil
}

// Stop ends the node namespace: SIGTERM to its PID 1, whose exit makes
// the kernel kill everything left inside; its mounts go with it. The
// caller removes the node's containers first (from inside, Run).
func (n *Node) Stop() error {
	if n == nil || n.cmd == nil {
		return nil
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
	return nil
}

// start starts PID 1 from an OS thread of its own that stays until PID 1
// has been waited for: the parent-death signal fires when the thread
// that forked it ends, and Go ends threads that a goroutine locked.
func (n *Node) start() error {
	started := make(chan error, 1)
	n.exited = make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(n.exited)
		if err := n.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = n.cmd.Wait()
	}()
	return <-started
}

// NodeInit is the node namespace's PID 1 (args: the node folder and the
// host's path of the stack's network namespace). It makes its mounts
// (the netns file, a /proc of the namespace, the shared kubelet root),
// says "ready" on fd 3, then reaps every process reparented to it until
// SIGTERM.
func NodeInit(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%s: want the node folder and the stack's netns path, got %q", NodeInitCommand, args)
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("%s: must be PID 1 of a new PID namespace (is PID %d)", NodeInitCommand, os.Getpid())
	}
	n := &Node{Dir: args[0]}
	// Nothing of the node propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the node's mounts slaves of the host's: %w", err)
	}
	// podman refuses :rshared on a private mount, and every mount here
	// is private: the node folder becomes a shared mount of its own.
	k := n.Dir
	if err := unix.Mount(k, k, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s onto itself: %w", k, err)
	}
	if err := unix.Mount("", k, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s shared: %w", k, err)
	}
	if err := unix.Mount(args[1], n.NetNS(), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the stack's network namespace %s to %s: %w", args[1], n.NetNS(), err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting the node's /proc: %w", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	ready := os.NewFile(3, "ready")
	if _, err := ready.WriteString("ready\n"); err != nil {
		return fmt.Errorf("saying ready: %w", err)
	}
	ready.Close()
	for sig := range sigs {
		// conmon double-forks to PID 1: reap whatever has ended.
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		if sig != syscall.SIGCHLD {
			return nil
		}
	}
	return nil
}

// tailOf is the last lines of a log file, for an error.
func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
