package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	splitVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm1, namespace: ns1}
spec:
  instancetype: {kind: virtualmachineinstancetype, name: small}
  preference: {name: virtio}
  template: {spec: {domain: {devices: {}}}}
`
	splitIT = `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineInstancetype
metadata: {name: small, namespace: ns1}
spec: {cpu: {guest: 1}, memory: {guest: 128Mi}}
`
	splitPref = `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterPreference
metadata: {name: virtio}
spec: {devices: {preferredDiskBus: virtio}}
`
)

// TestSplit: the VM and the instancetype and preference beside it are
// taken apart, and the VM's references find them.
func TestSplit(t *testing.T) {
	l, err := Split([]byte(splitIT+"---\n"+splitVM+"---\n"+splitPref), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if kindOf(l.Machine) != "VirtualMachine" || len(l.Objects) != 2 {
		t.Fatalf("machine %s, objects %+v", l.Machine, l.Objects)
	}
	if o := l.Objects[0]; o.Kind != KindInstancetype || o.Name != "small" || o.Namespace != "ns1" || o.Source != "f.yaml (document 1)" {
		t.Errorf("instancetype %+v", o)
	}
	if o := l.Objects[1]; o.Kind != KindClusterPreference || o.Name != "virtio" || o.Namespace != "" {
		t.Errorf("cluster preference %+v", o)
	}
	refs := Refs(l.Machine)
	want := []Ref{
		{Field: "spec.instancetype", Kind: KindInstancetype, Name: "small", Namespace: "ns1"},
		{Field: "spec.preference", Kind: KindClusterPreference, Name: "virtio"},
	}
	if len(refs) != 2 || refs[0] != want[0] || refs[1] != want[1] {
		t.Fatalf("refs %+v, want %+v", refs, want)
	}
	for _, r := range refs {
		if _, ok := r.Find(l.Objects); !ok {
			t.Errorf("%+v not found among %+v", r, l.Objects)
		}
	}
	// The same name in another namespace is another object.
	other := Ref{Field: "spec.instancetype", Kind: KindInstancetype, Name: "small", Namespace: "default"}
	if _, ok := other.Find(l.Objects); ok {
		t.Errorf("%+v found in another namespace", other)
	}
}

// TestSplitConfigMaps: the ConfigMaps a VM's hook sidecars name sit beside
// it, in the VM's namespace unless they name one.
func TestSplitConfigMaps(t *testing.T) {
	l, err := Split([]byte(splitVM+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\n"), "f.yaml")
	if err != nil || len(l.Objects) != 1 {
		t.Fatalf("%+v, %v", l, err)
	}
	if o := l.Objects[0]; o.Kind != KindConfigMap || o.Name != "c" || o.Namespace != "default" || o.Source != "f.yaml (document 2)" {
		t.Errorf("%+v", o)
	}
}

// TestSplitOneDocument: a file of one document is the machine itself (as
// JSON), whatever its kind: Read says what is wrong with it.
func TestSplitOneDocument(t *testing.T) {
	l, err := Split([]byte(splitVM), "f.yaml")
	if err != nil || kindOf(l.Machine) != "VirtualMachine" || len(l.Objects) != 0 {
		t.Fatalf("%+v, %v", l, err)
	}
	if l, err := Split([]byte("a: [\n"), "bad.yaml"); err != nil || string(l.Machine) != "a: [\n" {
		t.Errorf("invalid YAML is left to Read: %+v, %v", l, err)
	}
	if Refs([]byte(`{"kind":"VirtualMachineInstance","spec":{"instancetype":{"name":"x"}}}`)) != nil {
		t.Error("a VMI names no instancetype")
	}
}

// TestSplitRefusals: any other extra document, two machines or none are
// errors naming the document.
func TestSplitRefusals(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{splitVM + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: c}\n", `f.yaml: document 2: kind "Secret": a launch takes one VirtualMachine or VirtualMachineInstance and the VirtualMachineInstancetype, VirtualMachineClusterInstancetype, VirtualMachinePreference, VirtualMachineClusterPreference, ConfigMap objects it names`},
		{splitVM + "---\napiVersion: v2\nkind: ConfigMap\nmetadata: {name: c}\n", `f.yaml: document 2: ConfigMap: field apiVersion: got "v2", want "v1"`},
		{splitVM + "---\n" + splitVM, "f.yaml: documents 1 and 2 are both a VirtualMachine or VirtualMachineInstance: one launch runs one VMI"},
		{splitIT + "---\n" + splitPref, "f.yaml: 2 documents but no VirtualMachine or VirtualMachineInstance"},
		{splitVM + "---\n" + strings.Replace(splitIT, "v1beta1", "v1alpha9", 1), `f.yaml: document 2: VirtualMachineInstancetype: field apiVersion: got "instancetype.kubevirt.io/v1alpha9", want "instancetype.kubevirt.io/v1beta1"`},
		{splitVM + "---\n" + strings.Replace(splitIT, "name: small, ", "", 1), "f.yaml: document 2: VirtualMachineInstancetype: field metadata.name: must be set"},
		{splitVM + "---\n[1, 2]\n", `f.yaml: document 2: no kind: a launch takes`},
	} {
		_, err := Split([]byte(tc.in), "f.yaml")
		var inv *InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Split(%q) = %v, want an InvalidError containing %q", tc.in, err, tc.want)
		}
	}
}

// TestReadObjectDir: the folder's instancetypes and preferences are read,
// its other documents and files left out.
func TestReadObjectDir(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"a.yaml":    splitIT + "---\n" + splitVM,
		"b.json":    `{"apiVersion":"instancetype.kubevirt.io/v1beta1","kind":"VirtualMachineClusterPreference","metadata":{"name":"virtio"}}`,
		"notes.txt": "kind: VirtualMachineClusterInstancetype\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := ReadObjectDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Name != "small" || objs[1].Kind != KindClusterPreference || objs[1].Source != filepath.Join(dir, "b.json")+" (document 1)" {
		t.Fatalf("objects %+v", objs)
	}
	if _, err := ReadObjectDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing folder is an error")
	}
}
