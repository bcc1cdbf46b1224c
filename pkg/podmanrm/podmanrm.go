// Package podmanrm removes podman containers by name and rides out
// podman's race between a container's own exit and a forced removal.
//
// podman 4.3 (Debian 12) reads a container's state from its database,
// finds it running, and sends SIGKILL; when the container has just exited
// and conmon's clean-up has not yet recorded it, the OCI runtime refuses
// the signal and `podman rm --force` fails with exit 2: "cannot remove
// container X as it could not be stopped: sending SIGKILL to container X:
// container state improper: stopped" (podman issue #16142). The next
// attempt, once the exit is recorded, removes the container. Remove tries
// again on that error only, until the context ends; any other failure is
// returned at once.
package podmanrm

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Podman runs podman with args (after the binary's name) to completion
// and returns its combined output; callers put it behind nsenter or
// unshare as their containers need.
type Podman func(ctx context.Context, args ...string) (string, error)

// stateImproper is what podman prints for libpod's ErrCtrStateInvalid,
// the error of the race.
const stateImproper = "container state improper"

// retryEvery is the pause between two attempts after the race.
const retryEvery = 200 * time.Millisecond

// Remove removes the named containers, with no stop timeout, ignoring
// names that are already gone. An empty list is a no-op.
func Remove(ctx context.Context, podman Podman, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	args := append([]string{"rm", "--force", "--ignore", "--time", "0"}, names...)
	for attempt := 1; ; attempt++ {
		out, err := podman(ctx, args...)
		if err == nil {
			return nil
		}
		if !strings.Contains(out, stateImproper) && !strings.Contains(err.Error(), stateImproper) {
			return fmt.Errorf("podman rm %s: %w: %s", strings.Join(names, " "), err, out)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("podman rm %s: still refused after %d attempts (a container exiting as it was removed): %w: %s",
				strings.Join(names, " "), attempt, err, out)
		case <-time.After(retryEvery):
		}
	}
}
