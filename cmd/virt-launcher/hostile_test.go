package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// hostileVMI is a VMI that a dry run takes (its disk the claim "root")
// once NAME, MAC and CLOCK are replaced with harmless values.
const hostileVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: NAME
spec:
  domain:
    memory: {guest: 64Mi}
    clock: CLOCK
    devices:
      disks:
      - name: root
        disk: {bus: virtio}
      interfaces:
      - name: default
        masquerade: {}
        macAddress: MAC
        ports: [{port: 22}]
  networks:
  - name: default
    pod: {}
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: root}
`

// TestDryRunOfHostileManifestWritesNothing: `virt-launcher --dry-run` of a
// hostile manifest (the front, exec'ing the converter stage it was built
// with) exits 5 naming the field and leaves every folder it was given, and
// TMPDIR, as they were.
func TestDryRunOfHostileManifestWritesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the launcher's three stages")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, ".", "../virt-launcher-convert", "../virt-launcher-libvirt")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name, field string
		edits       []string
	}{
		{"nothing hostile (the positive control)", "", nil},
		{"a name with ../", "metadata.name", []string{"NAME", `"../../../tmp/x"`}},
		{"a MAC address with a QEMU option", "spec.domain.devices.interfaces[0].macAddress", []string{"MAC", `"52:54:00:12:34:56,romfile=/etc/shadow"`}},
		{"a time zone that is a path", "spec.domain.clock.timezone", []string{"CLOCK", `{timezone: ../../../etc/shadow}`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			tmp := filepath.Join(work, "tmp")
			for _, d := range []string{tmp, filepath.Join(work, "claims", "root")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(work, "claims", "root", "disk.img"), make([]byte, 4096), 0o644); err != nil {
				t.Fatal(err)
			}
			r := strings.NewReplacer(append(c.edits, "NAME", "hostile", "MAC", "02:00:00:00:00:01", "CLOCK", "{utc: {}}")...)
			manifest := filepath.Join(work, "vmi.yaml")
			if err := os.WriteFile(manifest, []byte(r.Replace(hostileVMI)), 0o644); err != nil {
				t.Fatal(err)
			}
			before := tree(t, work)
			a := launcherapi.Args{Manifest: manifest, DryRun: true, Accel: launcherapi.AccelTCG, RuntimeDir: filepath.Join(work, "run"),
				CacheDir: filepath.Join(work, "cache"), ConsoleLog: filepath.Join(work, "logs", "console.log"), ImageDir: filepath.Join(work, "images"),
				ClaimDir: filepath.Join(work, "claims"), FeatureGates: launcherapi.FeatureGateNames()}
			cmd := exec.Command(filepath.Join(bin, "virt-launcher"), a.Build()...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if c.field == "" {
				if err != nil || !strings.Contains(stdout.String(), "<domain") {
					t.Fatalf("the harmless VMI: %v\n%s", err, stderr.String())
				}
				return
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != int(launcherapi.ExitInvalidManifest) {
				t.Fatalf("exit %v, want %d; stderr:\n%s", err, launcherapi.ExitInvalidManifest, stderr.String())
			}
			if !strings.Contains(stderr.String(), "field "+c.field+": ") {
				t.Errorf("stderr does not name %s:\n%s", c.field, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("a refused dry run printed %q", stdout.String())
			}
			if after := tree(t, work); after != before {
				t.Errorf("the refused dry run changed the folders:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// tree lists every path under root, one a line.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(strings.TrimPrefix(p, root) + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
