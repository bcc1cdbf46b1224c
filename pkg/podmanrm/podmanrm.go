// Package podmanrm removes podman containers by name and rides out
// podman's races between a container's own end and a forced removal.
//
// podman 4.3 (Debian 12) has two. It reads a container's state from its
// database, finds it running, and sends SIGKILL; when the container has
// just exited and conmon's clean-up has not yet recorded it, the OCI
// runtime refuses the signal and `podman rm --force` fails with exit 2:
// "cannot remove container X as it could not be stopped: sending SIGKILL
// to container X: container state improper: stopped" (podman issue
// #16142). And a `--rm` container that removes itself while another
// podman command works on it makes that command fail with "no such
// container" ("does not exist in database"), --ignore notwithstanding
// (--ignore covers only the first look-up). Remove judges by the end
// state: after a failure it lists which of the names are still there,
// succeeds when none is, tries again on what is left after either race,
// until its context ends, and returns any other failure at once.
package podmanrm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Podman runs podman with args (after the binary's name) to completion
// and returns its combined output; callers put it behind nsenter or
// unshare as their containers need.
type Podman func(ctx context.Context, args ...string) (string, error)

// races are what podman prints for the two races: libpod's
// ErrCtrStateInvalid and ErrNoSuchCtr.
var races = []string{"container state improper", "no such container", "does not exist in database"}

// retryEvery is the pause between two attempts after a race.
const retryEvery = 200 * time.Millisecond

// Remove removes the named containers and their anonymous volumes (an
// image's VOLUME, such as the launcher image's, makes one for every
// container that mounts nothing there; each holds one of podman's 2048
// locks until it is removed), with no stop timeout, ignoring names that
// are already gone. An empty list is a no-op.
func Remove(ctx context.Context, podman Podman, names ...string) error {
	for attempt := 1; len(names) > 0; attempt++ {
		out, err := podman(ctx, append([]string{"rm", "--force", "--ignore", "--volumes", "--time", "0"}, names...)...)
		if err == nil {
			return nil
		}
		left, lerr := remaining(ctx, podman, names)
		switch {
		case lerr != nil:
			return fmt.Errorf("podman rm %s: %w: %s (and then %w)", strings.Join(names, " "), err, out, lerr)
		case len(left) == 0:
			return nil // gone, whoever removed them
		case !racing(out, err):
			return fmt.Errorf("podman rm %s: %w: %s", strings.Join(left, " "), err, out)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("podman rm %s: still there after %d attempts (containers ending as they were removed): %w: %s",
				strings.Join(left, " "), attempt, err, out)
		case <-time.After(retryEvery):
		}
		names = left
	}
	return nil
}

// racing reports whether a failed podman command met one of the races.
func racing(out string, err error) bool {
	for _, r := range races {
		if strings.Contains(out, r) || strings.Contains(err.Error(), r) {
			return true
		}
	}
	return false
}

// remaining lists which of names podman still has.
func remaining(ctx context.Context, podman Podman, names []string) ([]string, error) {
	out, err := podman(ctx, "ps", "--all", "--format", "{{.Names}}")
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w: %s", err, out)
	}
	all := strings.Fields(out)
	var left []string
	for _, n := range names {
		if slices.Contains(all, n) {
			left = append(left, n)
		}
	}
	return left, nil
}
