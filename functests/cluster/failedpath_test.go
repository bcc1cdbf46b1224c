package cluster_test

import "testing"

// TestFailedPaths checks the written fail-fast paths of the matrix's
// node-side rows against the ways a failed VMI can be recorded: each
// side's own paths pass, the other side's and half-paths fail.
func TestFailedPaths(t *testing.T) {
	const (
		direct   = "Pending → Scheduling → Failed"
		handover = "Pending → Scheduling → Scheduled → Failed"
	)
	for _, c := range []struct {
		side, phases string
		managers     []string
		want         bool
	}{
		{nodeSideVirtHandler, direct, []string{"virt-controller"}, true},
		{nodeSideVirtHandler, handover, []string{"virt-controller", "virt-handler"}, true},
		// Handed over, but nobody on the node wrote: not virt-handler's.
		{nodeSideVirtHandler, handover, []string{"virt-controller"}, false},
		// Failed while Scheduling, yet virt-handler wrote to it.
		{nodeSideVirtHandler, direct, []string{"virt-controller", "virt-handler"}, false},
		// The agent must write nothing to VMIs as kubelet.
		{nodeSideVirtHandler, handover, []string{"virt-controller", "virt-handler", "clusterlite"}, false},
		{nodeSideVirtHandler, direct, []string{"virt-controller", "clusterlite"}, false},
		{nodeSideAgent, handover, []string{"clusterlite", "virt-controller"}, true},
		{nodeSideAgent, direct, []string{"virt-controller"}, false},
		{nodeSideAgent, handover, []string{"clusterlite", "virt-controller", "virt-handler"}, false},
	} {
		got := false
		for _, f := range failedPathsBySide[c.side] {
			got = got || f.matches(c.side, c.phases, c.managers)
		}
		if got != c.want {
			t.Errorf("%s: %s by %v: matched %v, want %v", c.side, c.phases, c.managers, got, c.want)
		}
	}
}
