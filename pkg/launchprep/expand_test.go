package launchprep

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// itVM names an instancetype that the test does not give.
const itVM = `{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm1"},
  "spec": {"instancetype": {"kind": "VirtualMachineInstancetype", "name": "small"}, "template": {"spec": {"domain": {"devices": {}}}}}}`

// TestPrepareMissingObject: through the converter stage, a missing object
// is exit 5 with one line.
func TestPrepareMissingObject(t *testing.T) {
	var stderr bytes.Buffer
	args, _, _, ok := launchplan.Begin([]string{"--dry-run", "f.yaml"}, launcherapi.DefaultArgs(), &stderr)
	if !ok {
		t.Fatalf("flags: %s", stderr.String())
	}
	p, code := Prepare(context.Background(), Options{
		Request: launchplan.Request{Args: args, Input: "f.yaml", Manifest: []byte(itVM)},
		Stderr:  &stderr, ExpandExe: "/nonexistent",
	})
	if p != nil || code != launcherapi.ExitInvalidManifest {
		t.Fatalf("Prepare: %v, exit %d, want exit %d", p, code, launcherapi.ExitInvalidManifest)
	}
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `field spec.instancetype: VirtualMachineInstancetype "small" in namespace "default" not found`) {
		t.Errorf("stderr %q", got)
	}
}
