package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// flagsWith are valid run flags (the defaults of runController) with
// --instancetypes dir.
func flagsWith(dir string) runFlags {
	return runFlags{
		output: "json", preset: "kubevirt", logLevel: "info", launcher: "/bin/true", instancetypes: dir,
		timeScale: 1, maxDelay: 5 * time.Minute,
		qemuTimeout: launcherapi.DefaultStartTimeout.Base, qemuJitter: launcherapi.DefaultStartTimeout.Jitter,
	}
}

// TestInstancetypesFlag: --instancetypes is the expander's folder, the
// expander is virt-launcher-expand next to the running binary, and a VM
// naming an instancetype with none there is one line naming it and `make
// kubevirtmode`; a folder that is not one is refused by the flag's name.
func TestInstancetypesFlag(t *testing.T) {
	dir := t.TempDir()
	cfg, err := flagsWith(dir).config()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(self), "virt-launcher-expand"); cfg.Expander.Exe != want || cfg.Expander.Dir != dir {
		t.Errorf("expander %+v, want %s with folder %s", cfg.Expander, want, dir)
	}
	_, err = controller.ReadManifests(context.Background(), cfg.Expander, []string{"../../examples/vm-instancetype.yaml"})
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "needs virt-launcher-expand, which is not installed at "+cfg.Expander.Exe+": build it with `make kubevirtmode`") {
		t.Errorf("no expander next to the binary: %v", err)
	}
	file := filepath.Join(dir, "it.yaml")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := flagsWith(file).config(); err == nil || err.Error() != "--instancetypes "+file+": want a folder of instancetype and preference manifests" {
		t.Errorf("a file as the folder: %v", err)
	}
}

// TestFeatureGatesFlag: --feature-gates reaches every launcher's command
// line as the launcher's own --feature-gates; an unknown gate is refused
// naming the known ones.
func TestFeatureGatesFlag(t *testing.T) {
	f := flagsWith("")
	f.featureGates = []string{launcherapi.GateHostDisk, launcherapi.GateSidecar}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Launcher.FeatureGates, ","); got != "HostDisk,Sidecar" {
		t.Errorf("launcher gates %q, want HostDisk,Sidecar", got)
	}
	f.featureGates = []string{"Root"}
	if _, err := f.config(); err == nil || !strings.Contains(err.Error(), `unknown feature gate "Root": allowed values are HostDisk, Sidecar`) {
		t.Errorf("an unknown gate: %v", err)
	}
}
