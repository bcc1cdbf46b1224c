package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

func TestParseManifestsRejectsBadInput(t *testing.T) {
	vm := func(extra string) string {
		return "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: a\nspec:\n" + extra
	}
	cases := []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"unknown run strategy", vm("  runStrategy: Sometimes\n  template: {spec: {domain: {devices: {}}}}\n"),
			[]string{"spec.runStrategy", `"Sometimes"`, "Always, RerunOnFailure, Manual, Halted, Once"}},
		{"WaitAsReceiver is not supported", vm("  runStrategy: WaitAsReceiver\n  template: {spec: {domain: {devices: {}}}}\n"),
			[]string{"spec.runStrategy", "WaitAsReceiver"}},
		{"a VMI instead of a VM", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: a}\nspec: {domain: {devices: {}}}\n",
			[]string{"kind", "VirtualMachineInstance", "spec.template"}},
		{"no kind", "apiVersion: kubevirt.io/v1\nmetadata: {name: a}\n", []string{"kind", "missing"}},
		{"other kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n", []string{"kind", `"Pod"`}},
		{"wrong apiVersion", "apiVersion: kubevirt.io/v1alpha3\nkind: VirtualMachine\nmetadata: {name: a}\n", []string{"apiVersion", "kubevirt.io/v1"}},
		{"no name", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {template: {spec: {domain: {devices: {}}}}}\n", []string{"metadata.name"}},
		{"bad name", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: Bad_Name}\nspec: {template: {spec: {domain: {devices: {}}}}}\n", []string{"metadata.name", "Bad_Name"}},
		{"no template", vm("  runStrategy: Always\n"), []string{"spec.template"}},
		{"running and runStrategy", vm("  running: true\n  runStrategy: Always\n  template: {spec: {domain: {devices: {}}}}\n"), []string{"spec.running", "spec.runStrategy"}},
		{"misspelled field", vm("  runStrategey: Always\n  template: {spec: {domain: {devices: {}}}}\n"), []string{"unknown field", "runStrategey"}},
		{"an instancetype", vm("  instancetype: {name: small}\n  template: {spec: {domain: {devices: {}}}}\n"),
			[]string{"spec.instancetype", `VirtualMachineClusterInstancetype "small" not found: not in vm.yaml`, "--instancetypes"}},
		{"a preference", vm("  preference: {name: virtio}\n  template: {spec: {domain: {devices: {}}}}\n"), []string{"spec.preference", `VirtualMachineClusterPreference "virtio" not found`}},
		{"a bad instancetype", vm("  template: {spec: {domain: {devices: {}}}}\n") + "---\napiVersion: instancetype.kubevirt.io/v1alpha1\nkind: VirtualMachineInstancetype\nmetadata: {name: s}\n",
			[]string{"document 2", "VirtualMachineInstancetype", "apiVersion", "v1beta1"}},
		{"a ConfigMap", vm("  template: {spec: {domain: {devices: {}}}}\n") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n",
			[]string{"document 2", "a ConfigMap", "virt-launcher"}},
		{"not YAML", "{{{", []string{"YAML"}},
		{"empty", "# nothing\n", []string{"no VirtualMachine"}},
	}
	for _, c := range cases {
		_, err := ParseManifests(context.Background(), vmexpandexec.Expander{}, "vm.yaml", []byte(c.doc))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range append(c.want, "vm.yaml") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
}

func TestParseManifestsMultiDocAndDefaults(t *testing.T) {
	doc := vmYAML("one", "Always", nil) + "---\n# comment only\n---\n---\n" + vmYAML("two", "", nil)
	ms, err := ParseManifests(context.Background(), vmexpandexec.Expander{}, "f.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].VM.Name != "one" || ms[1].VM.Name != "two" || ms[1].Doc != 3 {
		t.Fatalf("got %d manifests: %+v", len(ms), ms)
	}
	if ms[0].VM.Namespace != "default" || ms[0].Digest == ms[1].Digest {
		t.Errorf("namespace %q, digests %s %s", ms[0].VM.Namespace, ms[0].Digest, ms[1].Digest)
	}
	// JSON works too.
	js := `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"j","namespace":"ns"},"spec":{"runStrategy":"Once","template":{"spec":{"domain":{"devices":{}}}}}}`
	if ms, err := ParseManifests(context.Background(), vmexpandexec.Expander{}, "j.json", []byte(js)); err != nil || ms[0].VM.Namespace != "ns" {
		t.Fatalf("JSON manifest: %v", err)
	}
}

func TestReadManifestsDuplicates(t *testing.T) {
	d := t.TempDir()
	a := writeFile(t, filepath.Join(d, "a.yaml"), vmYAML("same", "Always", nil))
	b := writeFile(t, filepath.Join(d, "b.yaml"), vmYAML("other", "Always", nil)+"---\n"+vmYAML("same", "Halted", nil))
	_, err := ReadManifests(context.Background(), vmexpandexec.Expander{}, []string{a, b})
	if err == nil || !strings.Contains(err.Error(), "duplicate") || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b+" (document 2)") {
		t.Fatalf("duplicates: %v", err)
	}
	if _, err := ReadManifests(context.Background(), vmexpandexec.Expander{}, []string{filepath.Join(d, "missing.yaml")}); err == nil || !os.IsNotExist(errorsUnwrapAll(err)) {
		t.Fatalf("missing file: %v", err)
	}
}

func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func FuzzParseManifests(f *testing.F) {
	f.Add([]byte(vmYAML("a", "Always", map[string]string{failFast: ""})))
	f.Add([]byte(vmYAML("a", "Bogus", nil) + "---\n" + vmYAML("b", "", nil)))
	f.Add([]byte(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"j"}}`))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := ParseManifests(context.Background(), vmexpandexec.Expander{}, "fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.VM.Name == "" || m.VM.Namespace == "" || m.VM.Spec.Template == nil {
				t.Fatalf("accepted an invalid VM: %+v", m.VM)
			}
			if err := validateVM(m.VM); err != nil {
				t.Fatalf("accepted VM fails validation: %v", err)
			}
		}
	})
}
