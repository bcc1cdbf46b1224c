package podmanrm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// racing fails like podman 4.3 does for the first n calls, then succeeds,
// and records every call's arguments.
type racing struct {
	n     int
	calls [][]string
	fail  string
}

func (r *racing) run(_ context.Context, args ...string) (string, error) {
	r.calls = append(r.calls, args)
	if len(r.calls) <= r.n {
		return r.fail, errors.New("exit status 2")
	}
	return "", nil
}

const raceOutput = `Error: cannot remove container 5651 as it could not be stopped: sending SIGKILL to container 5651: container state improper: stopped`

func TestRemoveRidesOutTheRace(t *testing.T) {
	r := &racing{n: 2, fail: raceOutput}
	if err := Remove(context.Background(), r.run, "a", "b"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if len(r.calls) != 3 {
		t.Fatalf("podman ran %d times, want 3 (two refusals, then the removal)", len(r.calls))
	}
	want := "rm --force --ignore --time 0 a b"
	for _, c := range r.calls {
		if got := strings.Join(c, " "); got != want {
			t.Errorf("podman %s, want podman %s", got, want)
		}
	}
}

func TestRemoveReturnsOtherErrorsAtOnce(t *testing.T) {
	r := &racing{n: 5, fail: "Error: database is locked"}
	err := Remove(context.Background(), r.run, "a")
	if err == nil || !strings.Contains(err.Error(), "database is locked") || !strings.Contains(err.Error(), "podman rm a") {
		t.Fatalf("Remove = %v, want podman's own error naming the container", err)
	}
	if len(r.calls) != 1 {
		t.Fatalf("podman ran %d times, want 1: only the race is tried again", len(r.calls))
	}
}

func TestRemoveGivesUpWhenTheContextEnds(t *testing.T) {
	r := &racing{n: 1 << 30, fail: raceOutput}
	ctx, cancel := context.WithTimeout(context.Background(), 3*retryEvery)
	defer cancel()
	err := Remove(ctx, r.run, "a")
	if err == nil || !strings.Contains(err.Error(), "still refused after") {
		t.Fatalf("Remove = %v, want the race's error once the context ended", err)
	}
	// Three pauses fit in the context: a retry, and no spinning.
	if len(r.calls) < 2 || len(r.calls) > 5 {
		t.Fatalf("podman ran %d times in %s, want 2 to 5 (one every %s)", len(r.calls), 3*retryEvery, retryEvery)
	}
	if ctx.Err() == nil {
		t.Fatal("Remove returned before its context ended")
	}
}

func TestRemoveNothing(t *testing.T) {
	r := &racing{}
	if err := Remove(context.Background(), r.run); err != nil || len(r.calls) != 0 {
		t.Fatalf("Remove() = %v after %d podman runs, want nil and none", err, len(r.calls))
	}
}
