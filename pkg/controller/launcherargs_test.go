package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// TestLauncherArgsPassFeatureGates: the controller's gates reach the
// launcher's command line as its --feature-gates, before the pass-through
// flags.
func TestLauncherArgsPassFeatureGates(t *testing.T) {
	argv := launcherArgs(LauncherOptions{FeatureGates: []string{launcherapi.GateHostDisk}, Args: []string{"--log-level=debug"}},
		launchRequest{Dir: launcherapi.Dir(t.TempDir()), Attempt: 1, QEMUTimeout: time.Second})
	got := strings.Join(argv, " ")
	if !strings.Contains(got, "--feature-gates HostDisk --log-level=debug") {
		t.Errorf("launcher command line %q has no --feature-gates HostDisk before the pass-through flags", got)
	}
	if a := strings.Join(launcherArgs(LauncherOptions{}, launchRequest{Dir: launcherapi.Dir(t.TempDir()), Attempt: 1, QEMUTimeout: time.Second}), " "); strings.Contains(a, "--feature-gates") {
		t.Errorf("no gates, yet %q", a)
	}
}
