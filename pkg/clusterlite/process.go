package clusterlite

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// child is one started etcd, kube-apiserver or KubeVirt component.
type child struct {
	name    string
	proc    *spawn.Process
	logPath string
	log     *slog.Logger
}

// startChild starts bin with args through sp (in its own process group,
// killed by the kernel if this process dies), with stdout and stderr
// appended to logPath. Its working folder is dir and its TMPDIR
// dir/tmp/<name>, so that what it leaves there (KubeVirt's virt-api makes a
// folder in TMPDIR and never removes it) goes with dir.
func startChild(sp *spawn.Spawner, logger *slog.Logger, name, bin string, args []string, dir, logPath string) (*child, error) {
	tmp := filepath.Join(dir, "tmp", name)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("create TMPDIR of %s: %w", name, err)
	}
	p, err := sp.Start(spawn.Spec{Path: bin, Args: args, Dir: dir, Env: []string{"TMPDIR=" + tmp},
		StdoutFile: logPath, StderrFile: logPath, Group: true})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, proc: p, logPath: logPath, log: logger.With("component", name, "pid", p.PID())}
	c.log.Info("started", "log", logPath)
	return c, nil
}

// exitError describes an unexpected end of the process, with the end of its
// log.
func (c *child) exitError() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", c.name, c.proc.Exit(), c.logPath, logTail(c.logPath, 15))
}

// stop stops the process group (spawn.Process.Stop: SIGTERM, then SIGKILL
// after grace or when ctx ends). It returns an error when the process had
// already exited, exited with a failure, or had to be killed.
func (c *child) stop(ctx context.Context, grace time.Duration) error {
	begin := time.Now()
	st, err := c.proc.Stop(ctx, grace)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", c.name, err)
	case st.Already:
		return fmt.Errorf("before stop: %w", c.exitError())
	case st.Killed:
		c.log.Warn("killed", "reason", st.Why)
		return fmt.Errorf("%s %s; killed", c.name, st.Why)
	case !st.Exit.Success() && st.Exit.Signal != syscall.SIGTERM:
		return fmt.Errorf("%s failed on SIGTERM: %v; last lines of %s:\n%s", c.name, st.Exit, c.logPath, logTail(c.logPath, 15))
	}
	c.log.Info("stopped", "after", time.Since(begin).Round(time.Millisecond))
	return nil
}

// logTail returns up to n last lines of the file at path, indented, or a
// note saying why it could not be read.
func logTail(path string, n int) string {
	lines, err := spawn.Tail(path, n)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString("    " + l + "\n")
	}
	return sb.String()
}
