package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		vmi, doc, err := VMI(data, "fuzz")
		if err != nil {
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		if vmi == nil || doc == nil || vmi.Name == "" {
			t.Fatalf("accepted without a name: %+v", vmi)
		}
	})
}
