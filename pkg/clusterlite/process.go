package clusterlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// killWait bounds the wait for a process after SIGKILL; only a process stuck
// in uninterruptible sleep outlives it.
const killWait = 10 * time.Second

// child is one started etcd or kube-apiserver.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *slog.Logger
	// done is closed when the process has been reaped; waitErr is then
	// cmd.Wait's result.
	done    chan struct{}
	waitErr error
}

// startChild starts bin with args in its own process group, with stdout and
// stderr appended to logPath, through sp. Its working folder is dir and its
// TMPDIR dir/tmp/<name>, so that what it leaves there (KubeVirt's virt-api
// makes a folder in TMPDIR and never removes it) goes with dir.
func startChild(sp *spawn.Spawner, logger *slog.Logger, name, bin string, args []string, dir, logPath string) (*child, error) {
	tmp := filepath.Join(dir, "tmp", name)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("create TMPDIR of %s: %w", name, err)
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	// The child holds its own descriptor once started.
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := sp.Start(cmd); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	c := &child{
		name:    name,
		cmd:     cmd,
		logPath: logPath,
		log:     logger.With("component", name, "pid", cmd.Process.Pid),
		done:    make(chan struct{}),
	}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	c.log.Info("started", "log", logPath)
	return c, nil
}

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exitError describes an unexpected end of the process, with the end of its
// log.
func (c *child) exitError() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", c.name, c.waitErr, c.logPath, logTail(c.logPath, 15))
}

// stop sends SIGTERM to the process group, waits up to grace (or until ctx
// ends) for the process to exit, and then sends SIGKILL. Any member of the
// group still alive afterwards is killed too. It returns an error when the
// process had already exited, exited with a failure, or had to be killed.
func (c *child) stop(ctx context.Context, grace time.Duration) error {
	pgid := c.cmd.Process.Pid
	// Whatever happens, nothing of the group survives stop.
	defer func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }()
	if c.exited() {
		return fmt.Errorf("before stop: %w", c.exitError())
	}
	start := time.Now()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("send SIGTERM to %s: %w", c.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	var why string
	select {
	case <-c.done:
		c.log.Info("stopped", "after", time.Since(start).Round(time.Millisecond))
		if c.waitErr != nil && !terminatedBy(c.waitErr, syscall.SIGTERM) {
			return fmt.Errorf("%s failed on SIGTERM: %w; last lines of %s:\n%s", c.name, c.waitErr, c.logPath, logTail(c.logPath, 15))
		}
		return nil
	case <-timer.C:
		why = fmt.Sprintf("still running %v after SIGTERM", grace)
	case <-ctx.Done():
		why = fmt.Sprintf("stop abandoned after %v: %v", time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	c.log.Warn("killing", "reason", why)
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s %s; send SIGKILL: %w", c.name, why, err)
	}
	select {
	case <-c.done:
		return fmt.Errorf("%s %s; killed", c.name, why)
	case <-time.After(killWait):
		return fmt.Errorf("%s %s; still not reaped %v after SIGKILL", c.name, why, killWait)
	}
}

// terminatedBy reports whether err is the exit of a process killed by sig.
func terminatedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// logTail returns up to n last lines of the file at path, indented, or a
// note saying why it could not be read.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	defer f.Close()
	const max = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		if _, err := f.Seek(st.Size()-max, io.SeekStart); err != nil {
			return "    (" + err.Error() + ")"
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString("    ")
		sb.Write(l)
		sb.WriteByte('\n')
	}
	return sb.String()
}
