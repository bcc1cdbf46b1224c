package monitor

import (
	"io"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// TestLauncherGetsEveryFeatureGate: the VMI virt-handler hands over was
// admitted by the cluster with its own gates, so the child launcher gets
// all of ours (a hostDisk volume or hook sidecars are not refused again).
func TestLauncherGetsEveryFeatureGate(t *testing.T) {
	a, err := launcherapi.ParseArgs(Flags{}.launcherArgs("/x/vmi.json", "", "", 0), launcherapi.DefaultArgs(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range launcherapi.FeatureGateNames() {
		if !a.GateEnabled(g) {
			t.Errorf("the child launcher's gates %v lack %s", a.FeatureGates, g)
		}
	}
}
