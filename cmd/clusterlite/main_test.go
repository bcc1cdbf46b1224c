package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseUpErrors(t *testing.T) {
	dir := t.TempDir()
	launcher := filepath.Join(dir, "virt-launcher")
	if err := os.WriteFile(launcher, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	good := []string{"--launcher", launcher, "--image-dir", dir, "--bin-dir", dir}
	if _, err := parseUp(good); err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	cases := map[string][]string{
		"--bin-dir /nonexistent":                                    append(append([]string{}, good...), "--bin-dir", "/nonexistent"),
		"not empty (1 entries)":                                     append(append([]string{}, good...), "--state-dir", dir),
		"unknown flag: --nodes":                                     append(append([]string{}, good...), "--nodes", "2"),
		`unexpected arguments ["extra"]`:                            append(append([]string{}, good...), "extra"),
		`--launcher-runtime "docker": want auto, podman or process`: append(append([]string{}, good...), "--launcher-runtime", "docker"),
		`--launcher-mode "virt": want direct or kubevirt`:           append(append([]string{}, good...), "--launcher-mode", "virt"),
		"KubeVirt mode runs launcher pods as podman containers":     append(append([]string{}, good...), "--launcher-mode", "kubevirt", "--launcher-runtime", "process"),
		"--driver /nonexistent":                                     append(append([]string{}, good...), "--launcher-mode", "kubevirt", "--driver", "/nonexistent"),
		`--node-side "kubelet": want agent or virt-handler`:         append(append([]string{}, good...), "--node-side", "kubelet"),
		"virt-handler: no such file or directory (build with `make clusterlite VIRT_HANDLER=1`)": append(append([]string{}, good...), "--node-side", "virt-handler"),
		"give neither --launcher-mode nor --launcher-runtime process":                            append(append([]string{}, good...), "--node-side", "virt-handler", "--launcher-runtime", "process"),
	}
	for want, args := range cases {
		if _, err := parseUp(args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseUp(%v) = %v, want an error containing %q", args, err, want)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "virt-launcher"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := " --launcher " + filepath.Join(dir, "virt-launcher") + " --image-dir " + dir + " --bin-dir " + dir
	for args, want := range map[string]int{"": 3, "down": 3, "up --log-level loud" + paths: 3, "--help": 0, "up --help": 0} {
		if got := run(strings.Fields(args)); got != want {
			t.Errorf("run(%q) = %d, want %d", args, got, want)
		}
	}
}
