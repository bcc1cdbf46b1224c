package launcher

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// ReaperFlag is the hidden first argument that turns virt-launcher into
// its own reaper process.
const ReaperFlag = "--internal-reaper"

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

// StartReaper starts exe (this program) as the reaper of target, its log
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

// RunReaper is the reaper process's main: args are the domain, the root and
// the URI given by StartReaper. It returns the process exit code.
func RunReaper(stdin io.Reader, args []string, log *slog.Logger) int {
	if len(args) != 3 {
		log.Error("reaper: want 3 arguments (domain, root, uri)", "got", args)
		return int(launcherapi.ExitUsage)
	}
	// Stay alive through the signals aimed at the launcher.
	ignoreStopSignals()
	target := ReaperTarget{Domain: args[0], Root: args[1], URI: args[2]}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "done" {
			return 0
		}
	}
	log.Warn("launcher died without cleaning up; reaping its VM", "domain", target.Domain, "root", target.Root)
	reap(target, log)
	return 0
}

func reap(t ReaperTarget, log *slog.Logger) {
	// Kill QEMU first: it is what must not survive. Match by domain name
	// and, for the embedded driver, by the root its command line mentions.
	for attempt := 0; attempt < 50; attempt++ {
		pids := qemu.FindQEMU(t.Domain, t.Root)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				log.Info("reaper killed QEMU", "pid", pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if t.URI != "" {
		if err := qemu.ForgetDomain(t.URI, t.Domain); err != nil {
			log.Warn("reaper could not remove the domain from libvirt", "err", err)
		}
	}
	if t.Root != "" {
		if err := os.RemoveAll(t.Root); err != nil {
			log.Warn("reaper could not remove the launcher's state", "root", t.Root, "err", err)
		}
	}
}
