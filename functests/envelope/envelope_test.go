package envelope

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	lo, hi := Bounds(1, 1)
	if lo != 10*time.Second || hi != 15*time.Second {
		t.Fatalf("Bounds(1, 1) = %v..%v, want KubeVirt's 10s..15s", lo, hi)
	}
	ok := Wait{VM: "ns/a", Count: 1, Low: lo, High: hi, Planned: 12 * time.Second, HasPlan: true, Observed: 12 * time.Second, Started: true}
	if err := Check([]Wait{ok}, Slack{Late: time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		w    Wait
		want string
	}{
		{"a plan below the envelope", Wait{Count: 1, Low: lo, High: hi, Planned: time.Second, HasPlan: true}, "failure 1: planned 1s"},
		{"a late retry", Wait{VM: "ns/a", Count: 1, Low: lo, High: hi, Observed: 17 * time.Second, Started: true}, "ns/a failure 1: waited 17s"},
		{"an early retry", Wait{Count: 2, Low: lo, High: hi, Observed: 8 * time.Second, Started: true}, "failure 2: waited 8s"},
	} {
		err := Check([]Wait{ok, c.w}, Slack{Early: time.Second, Late: time.Second})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "ns/a failure 1: planned") {
			t.Errorf("%s: Check = %v, want only %q", c.name, err, c.want)
		}
	}
	// A zero plan is checked when the controller announced one.
	if err := Check([]Wait{{Count: 1, Low: lo, High: hi, HasPlan: true}}, Slack{}); err == nil {
		t.Error("a zero plan passed")
	}
}
