package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// exampleFile is the repository's VM with its instancetype and preference
// in the same file.
const exampleFile = "../../examples/vm-instancetype.yaml"

// realExpander is KubeVirt's expansion, the real virt-launcher-expand:
// $VIRT_LAUNCHER_EXPAND (`make unit` sets it), else built from
// kubevirtmode into a temporary folder (a few seconds with a warm cache).
func realExpander(t *testing.T) string {
	t.Helper()
	if exe := os.Getenv("VIRT_LAUNCHER_EXPAND"); exe != "" {
		return exe
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("VIRT_LAUNCHER_EXPAND is not set and there is no go to build it with")
	}
	out := t.TempDir()
	cmd := exec.Command(gobin, "build", "-o", out+"/", "./cmd/virt-launcher-expand")
	cmd.Dir = "../../kubevirtmode"
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building virt-launcher-expand: %v\n%s", err, msg)
	}
	return filepath.Join(out, vmexpandexec.ExpanderName)
}

// checkExpanded asserts the example's instancetype (2 vCPUs, 384Mi) and
// preference (cores, virtio disks) on a VMI template or spec.
func checkExpanded(t *testing.T, what string, spec *v1.VirtualMachineInstanceSpec) {
	t.Helper()
	d := spec.Domain
	if d.CPU == nil || d.CPU.Cores != 2 || d.CPU.Sockets != 1 {
		t.Errorf("%s: CPU %+v, want the instancetype's 2 vCPUs as 2 cores (the preference)", what, d.CPU)
	}
	if d.Memory == nil || d.Memory.Guest == nil || d.Memory.Guest.String() != "384Mi" {
		t.Errorf("%s: memory %+v, want the instancetype's 384Mi", what, d.Memory)
	}
	if len(d.Devices.Disks) != 1 || d.Devices.Disks[0].Disk == nil || d.Devices.Disks[0].Disk.Bus != v1.DiskBusVirtio {
		t.Errorf("%s: disks %+v, want the preference's virtio bus", what, d.Devices.Disks)
	}
}

// TestExpansion runs the specs that need the real expander, built once.
func TestExpansion(t *testing.T) {
	exe := realExpander(t)
	t.Run("read", func(t *testing.T) { readExpanded(t, exe) })
	t.Run("kept like a revision", func(t *testing.T) { keptLikeARevision(t, exe) })
}

// readExpanded: a file with a VM, its instancetype and its
// preference reads as the VM as written (spec.instancetype kept, as
// KubeVirt's VM object keeps it) with the template KubeVirt's code
// expands, which the VMIs are made from; the digest is the VM document's.
// The objects may also come from the --instancetypes folder.
func readExpanded(t *testing.T, exe string) {
	exp := vmexpandexec.Expander{Exe: exe}
	ms, err := ReadManifests(context.Background(), exp, []string{exampleFile})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d manifests, want the one VM", len(ms))
	}
	m := ms[0]
	if m.VM.Spec.Instancetype == nil || m.VM.Spec.Instancetype.Name != "testguest-small" || m.VM.Spec.Preference == nil {
		t.Errorf("VM spec.instancetype %+v, preference %+v: want them kept", m.VM.Spec.Instancetype, m.VM.Spec.Preference)
	}
	if m.VM.Spec.Template.Spec.Domain.CPU != nil {
		t.Errorf("the VM's own template got CPU %+v; the expansion belongs in Manifest.Template", m.VM.Spec.Template.Spec.Domain.CPU)
	}
	if m.Template == nil {
		t.Fatal("no expanded template")
	}
	checkExpanded(t, "Manifest.Template", &m.Template.Spec)
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(data, []byte("\n---\n"))
	if sum := sha256.Sum256(append(first, '\n')); m.Digest != hex.EncodeToString(sum[:]) {
		t.Errorf("digest %s, want the SHA-256 of the VM document alone", m.Digest)
	}
	rec := &Record{VM: m.VM, Template: m.Template}
	vmi := newVMI(rec.VM, rec.template(), "uid", time.Unix(0, 0))
	checkExpanded(t, "the VMI", &vmi.Spec)

	// The same VM alone, its objects in a folder.
	vmOnly := writeFile(t, filepath.Join(t.TempDir(), "vm.yaml"), string(first)+"\n")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "objects.yaml"), string(data[len(first)+1:]))
	if _, err := ReadManifests(context.Background(), exp, []string{vmOnly}); err == nil || !strings.Contains(err.Error(), `VirtualMachineInstancetype "testguest-small" in namespace "default" not found`) {
		t.Fatalf("without the folder: %v, want the instancetype not found", err)
	}
	exp.Dir = dir
	ms, err = ReadManifests(context.Background(), exp, []string{vmOnly})
	if err != nil {
		t.Fatal(err)
	}
	checkExpanded(t, "from --instancetypes", &ms[0].Template.Spec)
}

// TestReadManifestsExpandFailures: an object the VM names that the file
// lacks is an error naming its kind, name and the file; the expander not
// installed is one line naming it and `make kubevirtmode`. A VM that names
// nothing needs no expander.
func TestReadManifestsExpandFailures(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	noPreference, _, _ := bytes.Cut(data, []byte("\n---\napiVersion: instancetype.kubevirt.io/v1beta1\nkind: VirtualMachinePreference"))
	path := writeFile(t, filepath.Join(t.TempDir(), "vm.yaml"), string(noPreference)+"\n")
	exe := filepath.Join(t.TempDir(), vmexpandexec.ExpanderName)
	_, err = ReadManifests(context.Background(), vmexpandexec.Expander{Exe: exe}, []string{path})
	want := path + `: field spec.preference: VirtualMachinePreference "testguest-virtio" in namespace "default" not found: not in ` + path
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("missing preference: %v\nwant %s...", err, want)
	}
	_, err = ReadManifests(context.Background(), vmexpandexec.Expander{Exe: exe}, []string{exampleFile})
	want = exampleFile + ` names VirtualMachineInstancetype "testguest-small": expanding it needs virt-launcher-expand, which is not installed at ` + exe + ": build it with `make kubevirtmode`"
	if err == nil || err.Error() != want {
		t.Errorf("not installed: %v\nwant %s", err, want)
	}
	plain := writeFile(t, filepath.Join(t.TempDir(), "plain.yaml"), vmYAML("plain", "Always", nil))
	if ms, err := ReadManifests(context.Background(), vmexpandexec.Expander{Exe: exe}, []string{plain}); err != nil || ms[0].Template != nil {
		t.Errorf("a VM naming nothing: %v, template %v", err, ms)
	}
}

// keptLikeARevision: the expansion is saved with the record
// and kept when only an object the VM names changes (the VM document's
// digest is the same), as a KubeVirt VM keeps its controller revisions; a
// change to the VM's own document expands it again.
func keptLikeARevision(t *testing.T, exe string) {
	exp := vmexpandexec.Expander{Exe: exe}
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(testConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	read := func(content string) Manifest {
		t.Helper()
		ms, err := ParseManifests(context.Background(), exp, "vm.yaml", []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}
	record := func(m Manifest) *Record {
		t.Helper()
		rec, err := c.initialRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := c.store.Encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.store.Write(KeyOf(rec.VM), enc); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	cores := func(rec *Record) uint32 {
		return newVMI(rec.VM, rec.template(), "u", time.Unix(0, 0)).Spec.Domain.CPU.Cores
	}
	if got := cores(record(read(string(data)))); got != 2 {
		t.Fatalf("first read: %d cores, want 2", got)
	}
	bigger := strings.Replace(string(data), "guest: 2\n", "guest: 3\n", 1)
	if got := cores(record(read(bigger))); got != 2 {
		t.Errorf("instancetype edited, VM unchanged: %d cores, want the saved expansion's 2", got)
	}
	relabelled := strings.Replace(bigger, "kubevirt.io/vm: testvm-instancetype", "kubevirt.io/vm: testvm-instancetype-2", 1)
	if got := cores(record(read(relabelled))); got != 3 {
		t.Errorf("VM edited: %d cores, want the new expansion's 3", got)
	}
}
