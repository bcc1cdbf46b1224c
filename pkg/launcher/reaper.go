package launcher

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/crashloop-harness/crashloop/pkg/qemu"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

// ReaperFlag is the hidden first argument that turns the light front,
// virt-launcher, into the reaper process (pkg/watchdog).
const ReaperFlag = watchdog.Flag

// Reaper is a watchdog process that outlives the launcher. QEMU started by
// libvirt is daemonized (its parent is PID 1), so nothing stops it when the
// launcher dies of SIGKILL; the reaper does. It holds the read end of a
// pipe whose write end only the launcher holds: when the launcher exits in
// any way, the reaper reads EOF. If the launcher said "done" first, the
// reaper just exits; otherwise it kills the domain's QEMU, removes the
// domain from an external libvirt, and deletes the per-VMI state.
type Reaper struct {
	w   *os.File
	cmd *exec.Cmd
}

// ReaperTarget is what a reaper cleans up.
type ReaperTarget struct {
	Domain string // libvirt domain name
	Root   string // embedded libvirt root (removed); may be empty
	URI    string // external libvirt URI; empty for the embedded driver
}

// StartReaper starts exe (the light front, virt-launcher) as the reaper of target, its log
// going to stderr. The reaper runs in its own process group so that a
// signal to the launcher's group (Ctrl-C, kill -9 -PGID) does not take it
// down with the launcher. children, when set, is told to leave the reaper
// to Done's wait.
func StartReaper(exe string, target ReaperTarget, stderr io.Writer, children *qemu.Children) (*Reaper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating reaper pipe: %w", err)
	}
	cmd := exec.Command(exe, ReaperFlag, target.Domain, target.Root, target.URI)
	cmd.Stdin = r
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("starting reaper: %w", err)
	}
	if children != nil {
		children.Leave(cmd.Process.Pid)
	}
	r.Close()
	return &Reaper{w: w, cmd: cmd}, nil
}

// Done tells the reaper that cleanup happened and waits for it to exit.
func (r *Reaper) Done() error {
	_, werr := io.WriteString(r.w, "done\n")
	r.w.Close()
	err := r.cmd.Wait()
	if werr != nil {
		return fmt.Errorf("telling reaper we are done: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("reaper: %w", err)
	}
	return nil
}
