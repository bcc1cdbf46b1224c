package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "kubevirt.io/api/core/v1"
)

const goodVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: vmi1
spec:
  domain:
    memory:
      guest: 128Mi
`

func TestVMI(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantErr   string
		wantField string
	}{
		{"good", goodVMI, "", ""},
		{"json", `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"x"}}`, "", ""},
		{"empty", "  \n", "empty manifest", ""},
		{"not yaml", "a: [b\n", "not valid YAML", ""},
		{"a list", "- a\n- b\n", "want a VirtualMachineInstance", ""},
		{"wrong kind", strings.Replace(goodVMI, "VirtualMachineInstance", "VirtualMachine", 1), `got kind "VirtualMachine", want "VirtualMachineInstance"`, "kind"},
		{"no kind", "apiVersion: kubevirt.io/v1\nmetadata: {name: a}\n", "got no kind", "kind"},
		{"wrong api", strings.Replace(goodVMI, "kubevirt.io/v1", "kubevirt.io/v1alpha3", 1), `want "kubevirt.io/v1"`, "apiVersion"},
		{"typo", strings.Replace(goodVMI, "guest:", "gust:", 1), "unknown field", "spec.domain.memory.gust"},
		{"bad type", strings.Replace(goodVMI, "metadata:\n  name: vmi1", "metadata:\n  name: [1]", 1), "metadata.name", ""},
		{"no name", strings.Replace(goodVMI, "  name: vmi1\n", "  labels: {a: b}\n", 1), "must be set", "metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi, doc, err := VMI([]byte(tt.in), "in.yaml")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("VMI: %v", err)
				}
				if vmi.Namespace != "default" || doc.Raw["kind"] != "VirtualMachineInstance" {
					t.Fatalf("namespace %q raw kind %v", vmi.Namespace, doc.Raw["kind"])
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want *InvalidError", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "in.yaml") {
				t.Fatalf("err = %q, want it to start with the input and contain %q", err, tt.wantErr)
			}
			if inv.Field != tt.wantField {
				t.Fatalf("field = %q, want %q", inv.Field, tt.wantField)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "missing.yaml"), dir} {
		_, _, err := ReadFile(path, nil)
		var u *UnreadableError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), path) {
			t.Fatalf("ReadFile(%s) = %v, want an *UnreadableError naming the path", path, err)
		}
	}
	p := filepath.Join(dir, "ok.yaml")
	os.WriteFile(p, []byte(goodVMI), 0o600)
	data, input, err := ReadFile(p, nil)
	if err != nil || input != p || string(data) != goodVMI {
		t.Fatalf("ReadFile = %q, %q, %v", data, input, err)
	}
	data, input, err = ReadFile("-", strings.NewReader("x"))
	if err != nil || input != "stdin" || string(data) != "x" {
		t.Fatalf("ReadFile(-) = %q, %q, %v", data, input, err)
	}
}

func TestVM(t *testing.T) {
	in := strings.Replace(goodVMI, "kind: VirtualMachineInstance", "kind: VirtualMachine", 1)
	in = strings.Replace(in, "spec:\n  domain:\n    memory:\n      guest: 128Mi\n", "spec:\n  runStrategy: Always\n  template:\n    spec:\n      domain:\n        memory:\n          guest: 128Mi\n", 1)
	vm, _, err := VM([]byte(in), "vm.yaml")
	if err != nil {
		t.Fatalf("VM: %v", err)
	}
	if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != "Always" {
		t.Fatalf("runStrategy = %v", vm.Spec.RunStrategy)
	}
	if _, _, err := VM([]byte(goodVMI), "vmi.yaml"); err == nil || !strings.Contains(err.Error(), `want "VirtualMachine"`) {
		t.Fatalf("VM(vmi) = %v", err)
	}
}

// FuzzVMI checks that no input makes the decoder panic, and that every
// error is one of the two documented kinds.
func FuzzVMI(f *testing.F) {
	f.Add([]byte(goodVMI))
	f.Add([]byte(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"x"},"spec":{"volumes":[{"name":"a","hostDisk":{"path":"/x","type":"Disk"}}]}}`))
	f.Add([]byte("kind: VirtualMachineInstance\napiVersion: kubevirt.io/v1\nmetadata: {name: a}\nspec: {domain: {cpu: {cores: -1}}}\n"))
	f.Add([]byte("- 1\n"))
	f.Add([]byte("&a [*a]"))
	f.Add([]byte(vmiDump))
	f.Add([]byte(vmDump))
	f.Add([]byte(goodVMI + "---\n" + goodVMI))
	f.Add([]byte("---\n---\nkind: VirtualMachine\napiVersion: kubevirt.io/v1\nmetadata: {name: a}\nspec: {template: {}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// VMI takes one kind, Read both (and a VM's template); both must
		// fail only with an *InvalidError and never accept a nameless VMI.
		for _, read := range []func([]byte, string) (*v1.VirtualMachineInstance, *Document, error){VMI, Read} {
			vmi, doc, err := read(data, "fuzz")
			if err != nil {
				var inv *InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("error of unexpected type %T: %v", err, err)
				}
				continue
			}
			if vmi == nil || doc == nil || vmi.Name == "" || vmi.Namespace == "" {
				t.Fatalf("accepted without a name or namespace: %+v", vmi)
			}
			if _, ok := doc.Raw["status"]; ok {
				t.Fatalf("status left in Raw")
			}
		}
	})
}

// vmiDump is a VMI as `kubectl get vmi -o yaml` prints it from a cluster.
const vmiDump = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  annotations:
    kubevirt.io/latest-observed-api-version: v1
    kubevirt.io/storage-observed-api-version: v1
    kubevirt.io/func-test-virt-launcher-fail-fast: "false"
  creationTimestamp: "2025-06-01T10:00:00Z"
  finalizers:
  - kubevirt.io/virtualMachineControllerFinalize
  - foregroundDeleteVirtualMachine
  generation: 4
  labels:
    kubevirt.io/nodeName: node01
    app: demo
  managedFields:
  - apiVersion: kubevirt.io/v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:annotations:
          .: {}
          f:kubevirt.io/latest-observed-api-version: {}
    manager: virt-controller
    operation: Update
    time: "2025-06-01T10:00:01Z"
  name: demo
  namespace: ns1
  ownerReferences:
  - apiVersion: kubevirt.io/v1
    blockOwnerDeletion: true
    controller: true
    kind: VirtualMachine
    name: demo
    uid: 0b1f3d2e-7a55-4f39-9e56-1f0a3a1b2c3d
  resourceVersion: "12345"
  uid: 6d3c1c5e-0b6a-4a43-9f43-0c3a3c6a9e01
spec:
  domain:
    memory:
      guest: 128Mi
status:
  phase: Running
  someFieldFromANewerKubeVirt: true
  conditions:
  - type: Ready
    status: "True"
`

func TestReadClusterDump(t *testing.T) {
	vmi, doc, err := Read([]byte(vmiDump), "dump.yaml")
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := []string{
		"metadata.annotations[kubevirt.io/latest-observed-api-version]",
		"metadata.annotations[kubevirt.io/storage-observed-api-version]",
		"metadata.creationTimestamp", "metadata.finalizers", "metadata.generation",
		"metadata.labels[kubevirt.io/nodeName]", "metadata.managedFields",
		"metadata.ownerReferences", "metadata.resourceVersion", "status",
	}
	if diff := cmp.Diff(want, doc.Ignored); diff != "" {
		t.Fatalf("Ignored (-want +got):\n%s", diff)
	}
	if vmi.UID != "6d3c1c5e-0b6a-4a43-9f43-0c3a3c6a9e01" || vmi.Namespace != "ns1" || vmi.Labels["app"] != "demo" {
		t.Fatalf("kept metadata wrong: %+v", vmi.ObjectMeta)
	}
	if vmi.Status.Phase != "" || vmi.ManagedFields != nil || vmi.Finalizers != nil {
		t.Fatalf("cluster-only fields reached the VMI: %+v %+v", vmi.Status, vmi.ObjectMeta)
	}
	if _, ok := doc.Raw["status"]; ok {
		t.Fatalf("status left in Raw")
	}
	if vmi.Annotations["kubevirt.io/func-test-virt-launcher-fail-fast"] != "false" {
		t.Fatalf("the launcher's own annotation was dropped")
	}
	// Strictness outside the cluster-only fields is unchanged.
	typo := strings.Replace(vmiDump, "      guest: 128Mi", "      gust: 128Mi", 1)
	_, _, err = Read([]byte(typo), "dump.yaml")
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Field != "spec.domain.memory.gust" {
		t.Fatalf("typo under spec: %v", err)
	}
	metaTypo := strings.Replace(vmiDump, "  resourceVersion:", "  resourceVersoin:", 1)
	if _, _, err = Read([]byte(metaTypo), "dump.yaml"); !errors.As(err, &inv) || inv.Field != "metadata.resourceVersoin" {
		t.Fatalf("typo in metadata: %v", err)
	}
}

const vmDump = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm1
  namespace: ns2
  uid: 0b1f3d2e-7a55-4f39-9e56-1f0a3a1b2c3d
  resourceVersion: "9"
  generation: 2
  labels: {vm-label: x}
spec:
  runStrategy: Always
  template:
    metadata:
      creationTimestamp: null
      labels: {kubevirt.io/domain: vm1, tmpl: z}
      annotations: {a: b}
    spec:
      domain:
        memory:
          guest: 128Mi
status:
  printableStatus: Running
`

func TestReadVM(t *testing.T) {
	vmi, doc, err := Read([]byte(vmDump), "vm.yaml")
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if vmi.Name != "vm1" || vmi.Namespace != "ns2" || vmi.Labels["tmpl"] != "z" || vmi.Labels["vm-label"] != "" || vmi.Annotations["a"] != "b" {
		t.Fatalf("metadata: %+v", vmi.ObjectMeta)
	}
	if vmi.UID == "" || vmi.UID == "0b1f3d2e-7a55-4f39-9e56-1f0a3a1b2c3d" {
		t.Fatalf("want a fresh UID, got %q", vmi.UID)
	}
	if vmi.Spec.Domain.Memory.Guest.String() != "128Mi" || doc.Kind != "VirtualMachine" {
		t.Fatalf("spec %+v kind %q", vmi.Spec.Domain, doc.Kind)
	}
	if doc.Raw["kind"] != "VirtualMachineInstance" || doc.Raw["spec"].(map[string]any)["domain"] == nil {
		t.Fatalf("Raw not VMI-shaped: %v", doc.Raw)
	}
	want := []string{"metadata.generation", "metadata.resourceVersion", "spec.runStrategy",
		"spec.template.metadata.labels[kubevirt.io/domain]", "status"}
	if diff := cmp.Diff(want, doc.Ignored); diff != "" {
		t.Fatalf("Ignored (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ name, in, field, msg string }{
		{"template typo", strings.Replace(vmDump, "          guest:", "          gest:", 1), "spec.template.spec.domain.memory.gest", "unknown field"},
		{"no template", strings.SplitN(vmDump, "  template:", 2)[0], "spec.template", "must be set"},
		{"instancetype", strings.Replace(vmDump, "  runStrategy: Always\n", "  instancetype: {name: u1.small}\n", 1), "spec.instancetype", `VirtualMachineClusterInstancetype "u1.small" is a cluster object`},
		{"pod", strings.Replace(vmDump, "kind: VirtualMachine", "kind: Pod", 1), "kind", `want "VirtualMachineInstance" or "VirtualMachine"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Read([]byte(tt.in), "vm.yaml")
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != tt.field || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want field %s and %q", err, tt.field, tt.msg)
			}
		})
	}
}

func TestReadDocuments(t *testing.T) {
	two := goodVMI + "---\n" + strings.Replace(goodVMI, "vmi1", "vmi2", 1)
	_, _, err := Read([]byte(two), "two.yaml")
	if err == nil || !strings.Contains(err.Error(), "2 YAML documents") || !strings.Contains(err.Error(), "want exactly one VirtualMachineInstance or VirtualMachine") {
		t.Fatalf("two documents: %v", err)
	}
	if _, _, err := VMI([]byte(two), "two.yaml"); err == nil || !strings.Contains(err.Error(), "2 YAML documents") {
		t.Fatalf("VMI with two documents: %v", err)
	}
	// Separators around one document and comment-only documents are fine.
	one := "---\n# a comment\n---\n" + goodVMI + "---\n"
	if vmi, _, err := Read([]byte(one), "one.yaml"); err != nil || vmi.Name != "vmi1" {
		t.Fatalf("one document with separators: %v", err)
	}
	if _, _, err := Read([]byte("---\n---\n"), "none.yaml"); err == nil || !strings.Contains(err.Error(), "empty manifest") {
		t.Fatalf("separators only: %v", err)
	}
}

// TestClearErrors: a folder given as the manifest and a document that is
// a JSON string get a sentence, not Go's internals.
func TestClearErrors(t *testing.T) {
	dir := t.TempDir()
	_, _, err := ReadFile(dir, nil)
	if err == nil || err.Error() != "reading "+dir+": it is a folder; give the manifest file (YAML or JSON) itself" {
		t.Fatalf("ReadFile(folder) = %v", err)
	}
	for doc, want := range map[string]string{
		`"just a string"`: "the document is a string, not an object",
		`[1, 2]`:          "the document is a list, not an object",
		`42`:              "the document is a number, not an object",
	} {
		_, _, err := Read([]byte(doc), "in.json")
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "unmarshal") {
			t.Errorf("Read(%s) = %v, want %q", doc, err, want)
		}
	}
}

// TestReadKeepsHookSidecars: the hook sidecar annotation of a VMI (a VM's
// template) is kept for the converter stage and, with the other
// annotations its sidecars may read, not reported as ignored; on the VM
// itself KubeVirt does not act on it, and it is reported.
func TestReadKeepsHookSidecars(t *testing.T) {
	const sidecars = `[{"image": "kubevirt/example-hook-sidecar"}]`
	tmpl := strings.Replace(vmDump, "      annotations: {a: b}", "      annotations: {hooks.kubevirt.io/hookSidecars: '"+sidecars+"', smbios.vm.kubevirt.io/baseBoardManufacturer: x}", 1)
	vmi, doc, err := Read([]byte(tmpl), "vm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if vmi.Annotations[HookSidecarsAnnotation] != sidecars || vmi.Annotations["smbios.vm.kubevirt.io/baseBoardManufacturer"] != "x" {
		t.Errorf("annotations %v", vmi.Annotations)
	}
	for _, f := range doc.Ignored {
		if strings.Contains(f, "annotations") {
			t.Errorf("reported as ignored: %s", f)
		}
	}
	onVM := strings.Replace(vmDump, "metadata:\n", "metadata:\n  annotations: {hooks.kubevirt.io/hookSidecars: '"+sidecars+"'}\n", 1)
	if _, doc, err := Read([]byte(onVM), "vm.yaml"); err != nil || !slices.Contains(doc.Ignored, "metadata.annotations[hooks.kubevirt.io/hookSidecars]") {
		t.Errorf("on the VM: ignored %v, err %v", doc.Ignored, err)
	}
}
