package watchdog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Client is the launcher's side of a running watchdog: the write end of
// the pipe the watchdog reads. It holds the only copy of that write end,
// so the watchdog reads EOF when the launcher exits in any way; Done tells
// it first that cleanup happened.
type Client struct {
	w    *os.File
	proc *os.Process
}

// Start starts exe (the light front, virt-launcher) as the watchdog of t,
// its log going to stderr. The watchdog runs in its own process group so
// that a signal to the launcher's group (Ctrl-C, kill -9 -PGID) does not
// take it down with the launcher.
func Start(exe string, t Target, stderr io.Writer) (*Client, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating the reaper's pipe: %w", err)
	}
	cmd := exec.Command(exe, Flag, t.Domain, t.Root, t.URI)
	cmd.Stdin = r
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the reaper: %w", err)
	}
	return &Client{w: w, proc: cmd.Process}, nil
}

// Adopt takes over a watchdog that this process started before it exec'd
// its current program: pid is the watchdog (a child of this process), fd
// the pipe's write end that Handoff kept open across exec.
func Adopt(pid, fd int) (*Client, error) {
	if pid <= 0 || fd < 0 {
		return nil, fmt.Errorf("adopting the reaper: want its PID and pipe descriptor, got %d and %d", pid, fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("adopting the reaper: descriptor %d is not its pipe (%v)", fd, err)
	}
	unix.CloseOnExec(fd)
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("adopting the reaper %d: %w", pid, err)
	}
	return &Client{w: os.NewFile(uintptr(fd), "reaper-pipe"), proc: proc}, nil
}

// PID is the watchdog's process ID.
func (c *Client) PID() int { return c.proc.Pid }

// Handoff keeps the pipe's write end open across this process's next exec
// and returns its descriptor, for Adopt in the program exec'd.
func (c *Client) Handoff() (int, error) {
	fd := int(c.w.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return 0, fmt.Errorf("keeping the reaper's pipe open across exec: %w", err)
	}
	return fd, nil
}

// Done tells the watchdog that cleanup happened and waits for it to exit.
func (c *Client) Done() error {
	var errs []error
	if _, err := io.WriteString(c.w, "done\n"); err != nil {
		errs = append(errs, fmt.Errorf("telling the reaper we are done: %w", err))
	}
	c.w.Close()
	st, err := c.proc.Wait()
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("waiting for the reaper: %w", err))
	case !st.Success():
		errs = append(errs, fmt.Errorf("reaper: %s", st))
	}
	return errors.Join(errs...)
}
