package launchprep

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// hostDiskVMI asks for a DiskOrCreate host disk in a folder that does not
// exist, as KubeVirt's vmi-host-disk example does with /var/data.
const hostDiskVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: hd
spec:
  domain:
    memory:
      guest: 64Mi
    devices:
      disks:
      - name: host
        disk: {bus: virtio}
  volumes:
  - name: host
    hostDisk:
      path: HOSTDISK
      type: DiskOrCreate
      capacity: 1Mi
`

// TestDryRunChangesNothing: a dry run makes no hostDisk image or folder,
// no runtime or console-log folder, and takes relative folders as relative
// to the working directory.
func TestDryRunChangesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	hostDisk := filepath.Join(dir, "var", "data", "disk.img")
	if err := os.WriteFile("vmi.yaml", []byte(strings.Replace(hostDiskVMI, "HOSTDISK", hostDisk, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	argv := []string{"--dry-run", "--feature-gates", "HostDisk", "--runtime-dir", "run", "--console-log", "logs/console.log", "--claim-dir", "claims", "--image-dir", "images", "vmi.yaml"}
	args, _, _, ok := launchplan.Begin(argv, launcherapi.DefaultArgs(), &stderr)
	if !ok {
		t.Fatalf("flags: %s", stderr.String())
	}
	data, err := os.ReadFile("vmi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, code := Prepare(context.Background(), Options{
		Request: launchplan.Request{Args: args, Input: "vmi.yaml", Manifest: data},
		Stderr:  &stderr,
	})
	if p == nil {
		t.Fatalf("Prepare: exit %d: %s", code, stderr.String())
	}
	defer p.Abandon()
	for _, f := range []string{filepath.Dir(hostDisk), "run", "logs", "claims"} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("dry run made %s (%v)", f, err)
		}
	}
	if want := filepath.Join(dir, "logs", "console.log"); !strings.Contains(p.Plan.DomainXML, want) {
		t.Errorf("domain does not name the console log as %s:\n%s", want, p.Plan.DomainXML)
	}
}

// escapingVMI is a VMI whose metadata climbs out of the console log
// folder when it is pasted into the log's file name.
const escapingVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: NAME
  namespace: NAMESPACE
spec:
  domain:
    memory:
      guest: 64Mi
    devices:
      disks:
      - name: host
  volumes:
  - name: host
    hostDisk:
      path: HOSTDISK
      type: Disk
`

// TestLogNamesStayInTheConsoleFolder: the console and libvirt logs named
// after namespace, name and UID stay in their folder, or the launch is
// refused as an invalid manifest naming the field (no admission check in
// front: the converter stage is called directly).
func TestLogNamesStayInTheConsoleFolder(t *testing.T) {
	for _, tt := range []struct{ name, namespace, field string }{
		{"vm", "a/../../../../tmp/escaped", "metadata.namespace"},
		{"../../../../tmp/escaped", "ns", "metadata.name"},
		{"..", "ns/x", "metadata.namespace"},
	} {
		t.Run(tt.namespace+" "+tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			disk := filepath.Join(dir, "disk.img")
			if err := os.WriteFile(disk, make([]byte, 4096), 0o600); err != nil {
				t.Fatal(err)
			}
			doc := strings.NewReplacer("NAMESPACE", tt.namespace, "NAME", tt.name, "HOSTDISK", disk).Replace(escapingVMI)
			var stderr bytes.Buffer
			args, _, _, ok := launchplan.Begin([]string{"--dry-run", "--runtime-dir", "run", "vmi.yaml"}, launcherapi.DefaultArgs(), &stderr)
			if !ok {
				t.Fatalf("flags: %s", stderr.String())
			}
			p, code := Prepare(context.Background(), Options{
				Request: launchplan.Request{Args: args, Input: "vmi.yaml", Manifest: []byte(doc)},
				Stderr:  &stderr,
			})
			if p != nil {
				defer p.Abandon()
				for _, f := range []string{p.Plan.ConsoleLog, p.Plan.LibvirtLog} {
					if filepath.Dir(f) != launcherapi.DefaultConsoleDir {
						t.Errorf("log %s is outside %s", f, launcherapi.DefaultConsoleDir)
					}
				}
				t.Fatalf("Prepare accepted %s/%s", tt.namespace, tt.name)
			}
			if code != launcherapi.ExitInvalidManifest || !strings.Contains(stderr.String(), tt.field) {
				t.Fatalf("exit %d, stderr %q: want %d naming %s", code, stderr.String(), launcherapi.ExitInvalidManifest, tt.field)
			}
		})
	}
}

// TestLogsStayInTheirFolder: a symbolic link planted in the console log's
// folder under the console or the libvirt log's name, pointing outside,
// is refused before anything else is made (QEMU and libvirt would follow
// it by path), and a log made there is 0600 in a 0700 folder under a
// permissive umask.
func TestLogsStayInTheirFolder(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, planted := range []string{"console.log", "console.libvirt.log"} {
		t.Run(planted, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir("logs", 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join("logs", planted)); err != nil {
				t.Fatal(err)
			}
			doc := strings.Replace(hostDiskVMI, "HOSTDISK", filepath.Join(dir, "host.img"), 1)
			var stderr bytes.Buffer
			args, _, _, ok := launchplan.Begin([]string{"--feature-gates", "HostDisk", "--runtime-dir", "run", "--console-log", "logs/console.log", "vmi.yaml"}, launcherapi.DefaultArgs(), &stderr)
			if !ok {
				t.Fatalf("flags: %s", stderr.String())
			}
			p, code := Prepare(context.Background(), Options{
				Request: launchplan.Request{Args: args, Input: "vmi.yaml", Manifest: []byte(doc)},
				Stderr:  &stderr,
			})
			if p != nil {
				p.Abandon()
				t.Fatalf("Prepare accepted a planted %s", planted)
			}
			if code != launcherapi.ExitUsage || !strings.Contains(stderr.String(), "--console-log") {
				t.Errorf("exit %d, stderr %q: want %d naming --console-log", code, stderr.String(), launcherapi.ExitUsage)
			}
			if data, err := os.ReadFile(victim); err != nil || string(data) != "original" {
				t.Errorf("the file outside the log folder: %q %v, want it untouched", data, err)
			}
			if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("the file outside the log folder: %v %v, want its mode kept", fi, err)
			}
			for _, f := range []string{"run", "host.img"} {
				if _, err := os.Lstat(f); !os.IsNotExist(err) {
					t.Errorf("%s was made before the logs were refused (%v)", f, err)
				}
			}
			if planted == "console.libvirt.log" {
				fi, err := os.Lstat(filepath.Join("logs", "console.log"))
				if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
					t.Errorf("console log: %v %v, want a regular file of mode 0600", fi, err)
				}
			}
		})
	}
}
