package launcher

import (
	"fmt"

	"golang.org/x/sys/unix"
	"os/signal"
	"syscall"
)

// BecomeSubreaper makes this process inherit its orphaned descendants
// (QEMU daemonized by libvirt), so it can reap them promptly.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	return nil
}

// reapChild waits for pid to exit if it is a child of this process, and
// returns its wait status and whether it was a child.
func reapChild(pid int) (syscall.WaitStatus, bool) {
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(pid, &ws, 0, nil)
	return ws, err == nil
}

func ignoreStopSignals() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
}
