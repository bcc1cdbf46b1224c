package vmexpandexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

const (
	itVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm1}
spec:
  instancetype: {kind: VirtualMachineInstancetype, name: small}
  preference: {name: virtio}
  template: {spec: {domain: {devices: {}}}}
`
	itSmall = `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineInstancetype
metadata: {name: small}
spec: {cpu: {guest: 1}, memory: {guest: 128Mi}}
`
	itVirtio = `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterPreference
metadata: {name: virtio}
spec: {devices: {preferredDiskBus: virtio}}
`
	// expandedVM stands for what virt-launcher-expand writes.
	expandedVM = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm1"},"spec":{"template":{"spec":{"domain":{"memory":{"guest":"128Mi"},"devices":{}}}}}}`
)

// fakeExpander writes a stand-in for virt-launcher-expand that records its
// stdin in record and answers with stdout and exit status code.
func fakeExpander(t *testing.T, record, stdout string, code int) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), ExpanderName)
	script := "#!/bin/sh\ncat > '" + record + "'\n"
	if code == 0 {
		script += "printf '%s\\n' '" + stdout + "'\n"
	} else {
		script += "echo '" + stdout + "' >&2\nexit " + string(rune('0'+code)) + "\n"
	}
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestExpanderMissingObject: an object the VM names that is neither in its
// file nor in the folder is an error naming its field, kind and name, and
// where it was looked for.
func TestExpanderMissingObject(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		e    Expander
		in   string
		want string
	}{
		{Expander{Exe: "/nonexistent"}, itVM + "---\n" + itVirtio,
			`f.yaml: field spec.instancetype: VirtualMachineInstancetype "small" in namespace "default" not found: not in f.yaml (put it there beside the VM, or name a folder of such objects with --instancetypes)`},
		{Expander{Exe: "/nonexistent"}, strings.Replace(itVM, "name: small", "inferFromVolume: root", 1),
			`f.yaml: field spec.instancetype.name: must be set: inferring the object from a volume (inferFromVolume) needs the volume's labels`},
		{Expander{Exe: "/nonexistent", Dir: dir}, itVM + "---\n" + itSmall,
			`f.yaml: field spec.preference: VirtualMachineClusterPreference "virtio" not found: not in f.yaml nor in --instancetypes ` + dir},
	} {
		_, err := tc.e.Machine(context.Background(), []byte(tc.in), "f.yaml")
		var inv *manifest.InvalidError
		if !errors.As(err, &inv) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Machine = %v, want an InvalidError %q", err, tc.want)
		}
	}
}

// TestExpanderFromFolder: the objects come from the VM's file and from the
// --instancetypes folder; the expander gets the VM first, then the two it
// names, and its answer is the machine that runs.
func TestExpanderFromFolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small.yaml"), []byte(itSmall), 0o644); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "stdin")
	e := Expander{Exe: fakeExpander(t, record, expandedVM, 0), Dir: dir}
	got, err := e.Machine(context.Background(), []byte(itVM+"---\n"+itVirtio), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != expandedVM {
		t.Errorf("machine %s, want the expander's answer", got)
	}
	stdin, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(stdin), "\n---\n")
	if len(docs) != 3 || !strings.Contains(docs[0], `"kind":"VirtualMachine"`) ||
		!strings.Contains(docs[1], `"kind":"VirtualMachineInstancetype"`) || !strings.Contains(docs[2], `"kind":"VirtualMachineClusterPreference"`) {
		t.Errorf("the expander's stdin, want the VM, its instancetype (from the folder), its preference (from the file):\n%s", stdin)
	}
	// A machine that names nothing is not expanded.
	vmi := `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"v"}}`
	if got, err := (Expander{Exe: "/nonexistent"}).Machine(context.Background(), []byte(vmi), "v.json"); err != nil || string(got) != vmi {
		t.Errorf("VMI: %s, %v", got, err)
	}
}

// TestExpanderFailures: KubeVirt refusing the VM is an invalid manifest
// with its words; the expander not installed says which binary and how to
// build it.
func TestExpanderFailures(t *testing.T) {
	in := []byte(itVM + "---\n" + itSmall + "---\n" + itVirtio)
	record := filepath.Join(t.TempDir(), "stdin")
	msg := "spec.template.spec.domain.memory: VM field(s) spec.template.spec.domain.memory conflicts with selected instance type"
	_, err := Expander{Exe: fakeExpander(t, record, msg, 1)}.Machine(context.Background(), in, "f.yaml")
	var inv *manifest.InvalidError
	if !errors.As(err, &inv) || err.Error() != "f.yaml: KubeVirt refuses the VirtualMachine: "+msg {
		t.Errorf("refused: %v", err)
	}
	missing := filepath.Join(t.TempDir(), ExpanderName)
	_, err = Expander{Exe: missing}.Machine(context.Background(), in, "f.yaml")
	want := `f.yaml names VirtualMachineInstancetype "small": expanding it needs virt-launcher-expand, which is not installed at ` + missing + ": build it with `make kubevirtmode`"
	if err == nil || errors.As(err, &inv) || err.Error() != want {
		t.Errorf("not installed: %v, want %q (not an invalid manifest)", err, want)
	}
}
