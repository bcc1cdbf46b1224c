package podmanrm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// fakePodman plays podman's rm and ps: rm fails with fail for the first n
// calls, removing only the names in sticky's complement, and then removes
// everything; ps lists what is left. It records every rm.
type fakePodman struct {
	n      int
	fail   string
	exists map[string]bool
	// sticky names survive a failed rm (the racing ones).
	sticky map[string]bool
	rms    [][]string
	psErr  error
}

func newFake(n int, fail string, names []string, sticky ...string) *fakePodman {
	f := &fakePodman{n: n, fail: fail, exists: map[string]bool{}, sticky: map[string]bool{}}
	for _, name := range names {
		f.exists[name] = true
	}
	for _, name := range sticky {
		f.sticky[name] = true
	}
	return f
}

func (f *fakePodman) run(_ context.Context, args ...string) (string, error) {
	switch args[0] {
	case "ps":
		if f.psErr != nil {
			return "", f.psErr
		}
		var names []string
		for n := range f.exists {
			names = append(names, n)
		}
		return strings.Join(names, "\n"), nil
	case "rm":
		if got := strings.Join(args[:6], " "); got != "rm --force --ignore --volumes --time 0" {
			return "", errors.New("unexpected podman " + got)
		}
		names := args[6:]
		f.rms = append(f.rms, names)
		failing := len(f.rms) <= f.n
		for _, n := range names {
			if !failing || !f.sticky[n] {
				delete(f.exists, n)
			}
		}
		if failing {
			return f.fail, errors.New("exit status 2")
		}
		return "", nil
	}
	return "", errors.New("unexpected podman " + strings.Join(args, " "))
}

const (
	stateImproper = `Error: cannot remove container 5651 as it could not be stopped: sending SIGKILL to container 5651: container state improper: stopped`
	noSuch        = `Error: container 5651 does not exist in database: no such container`
)

func TestRemoveRidesOutTheRace(t *testing.T) {
	f := newFake(2, stateImproper, []string{"a", "b", "c"}, "b")
	if err := Remove(context.Background(), f.run, "a", "b"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if len(f.rms) != 3 {
		t.Fatalf("podman rm ran %d times, want 3 (two refusals, then the removal)", len(f.rms))
	}
	if got := strings.Join(f.rms[1], " "); got != "b" {
		t.Errorf("the retry removed %q, want only what was left, b", got)
	}
	if !f.exists["c"] || f.exists["a"] || f.exists["b"] {
		t.Errorf("containers left %v, want only c, which was not named", f.exists)
	}
}

func TestRemoveSucceedsWhenTheContainersAreGone(t *testing.T) {
	// A --rm container removed itself while rm worked on it: podman
	// fails, and nothing named is left.
	f := newFake(1, noSuch, []string{"a"})
	if err := Remove(context.Background(), f.run, "a"); err != nil {
		t.Fatalf("Remove = %v, want success: the container is gone", err)
	}
	if len(f.rms) != 1 {
		t.Fatalf("podman rm ran %d times, want 1", len(f.rms))
	}
}

func TestRemoveReturnsOtherErrorsAtOnce(t *testing.T) {
	f := newFake(5, "Error: database is locked", []string{"a"}, "a")
	err := Remove(context.Background(), f.run, "a")
	if err == nil || !strings.Contains(err.Error(), "database is locked") || !strings.Contains(err.Error(), "podman rm a") {
		t.Fatalf("Remove = %v, want podman's own error naming the container", err)
	}
	if len(f.rms) != 1 {
		t.Fatalf("podman rm ran %d times, want 1: only the races are tried again", len(f.rms))
	}
}

func TestRemoveSaysWhenItCannotList(t *testing.T) {
	f := newFake(1, stateImproper, []string{"a"}, "a")
	f.psErr = errors.New("exit status 125")
	err := Remove(context.Background(), f.run, "a")
	if err == nil || !strings.Contains(err.Error(), "listing containers") || !strings.Contains(err.Error(), "state improper") {
		t.Fatalf("Remove = %v, want the removal's and the listing's errors", err)
	}
}

func TestRemoveGivesUpWhenTheContextEnds(t *testing.T) {
	f := newFake(1<<30, stateImproper, []string{"a"}, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 3*retryEvery)
	defer cancel()
	err := Remove(ctx, f.run, "a")
	if err == nil || !strings.Contains(err.Error(), "still there after") {
		t.Fatalf("Remove = %v, want the race's error once the context ended", err)
	}
	// Three pauses fit in the context: a retry, and no spinning.
	if len(f.rms) < 2 || len(f.rms) > 5 {
		t.Fatalf("podman rm ran %d times in %s, want 2 to 5 (one every %s)", len(f.rms), 3*retryEvery, retryEvery)
	}
	if ctx.Err() == nil {
		t.Fatal("Remove returned before its context ended")
	}
}

func TestRemoveNothing(t *testing.T) {
	f := newFake(0, "", nil)
	if err := Remove(context.Background(), f.run); err != nil || len(f.rms) != 0 {
		t.Fatalf("Remove() = %v after %d podman rm, want nil and none", err, len(f.rms))
	}
}
