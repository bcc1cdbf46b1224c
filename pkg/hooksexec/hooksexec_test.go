package hooksexec

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// fakeHooks writes a stand-in for virt-launcher-hooks (unit tests only):
// it saves its arguments and stdin, then runs body.
func fakeHooks(t *testing.T, body string) (exe, dir string) {
	dir = t.TempDir()
	exe = filepath.Join(dir, HooksName)
	script := "#!/bin/sh\necho \"$@\" > " + dir + "/args\ncat > " + dir + "/stdin\n" + body + "\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe, dir
}

func vmi() *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: "ns",
		Annotations: map[string]string{manifest.HookSidecarsAnnotation: `[{"image": "kubevirt/sidecar-shim"}]`}}}
}

func TestApplySendsTheRequestAndReturnsTheDomain(t *testing.T) {
	exe, dir := fakeHooks(t, `echo "<domain>rewritten</domain>"`)
	objs := []manifest.Object{
		{Kind: manifest.KindConfigMap, Name: "cm", Namespace: "ns", JSON: []byte(`{"data": {"k": "from the file"}}`)},
		{Kind: manifest.KindConfigMap, Name: "cm", Namespace: "ns", JSON: []byte(`{"data": {"k": "from the folder"}}`)},
		{Kind: manifest.KindConfigMap, Name: "elsewhere", Namespace: "other", JSON: []byte(`{"data": {"k": "x"}}`)},
	}
	out, err := Runner{Exe: exe, WorkDir: "/w"}.Apply(context.Background(), vmi(), "<domain/>", objs, "vmi.yaml")
	if err != nil || strings.TrimSpace(out) != "<domain>rewritten</domain>" {
		t.Fatalf("out %q, err %v", out, err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if strings.TrimSpace(string(args)) != "--start --work-dir /w" {
		t.Errorf("args %q", args)
	}
	var req request
	data, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	if err := json.Unmarshal(data, &req); err != nil {
		t.Fatal(err)
	}
	if req.Domain != "<domain/>" || req.VMI.Name != "v" || len(req.ConfigMaps) != 1 || req.ConfigMaps["cm"]["k"] != "from the file" {
		t.Errorf("request %+v", req)
	}
}

func TestApplyInKubeVirtModeWaitsForThePodsSidecars(t *testing.T) {
	exe, dir := fakeHooks(t, `echo "<domain/>"`)
	if _, err := (Runner{Exe: exe, Sidecars: 2, Timeout: 263e9}).Apply(context.Background(), vmi(), "<domain/>", nil, "vmi.yaml"); err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if strings.TrimSpace(string(args)) != "--sidecars 2 --timeout 4m23s" {
		t.Errorf("args %q", args)
	}
}

func TestApplyErrors(t *testing.T) {
	exe, _ := fakeHooks(t, `echo "annotation hooks.kubevirt.io/hookSidecars: sidecar 0: field image: nope" >&2; exit 1`)
	_, err := Runner{Exe: exe, WorkDir: "/w"}.Apply(context.Background(), vmi(), "<domain/>", nil, "vmi.yaml")
	var invalid *manifest.InvalidError
	if !errors.As(err, &invalid) || err.Error() != "vmi.yaml: annotation hooks.kubevirt.io/hookSidecars: sidecar 0: field image: nope" {
		t.Errorf("refused: got %v, want the helper's line as an InvalidError", err)
	}
	_, err = Runner{Exe: "/nonexistent/" + HooksName}.Apply(context.Background(), vmi(), "<domain/>", nil, "vmi.yaml")
	if err == nil || errors.As(err, &invalid) || !strings.Contains(err.Error(), "build it with `make kubevirtmode`") {
		t.Errorf("not installed: got %v", err)
	}
	bad := []manifest.Object{{Kind: manifest.KindConfigMap, Name: "cm", Namespace: "ns", Source: "vmi.yaml (document 2)", JSON: []byte(`{"data": {"k": 1}}`)}}
	_, err = Runner{Exe: exe}.Apply(context.Background(), vmi(), "<domain/>", bad, "vmi.yaml")
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), `vmi.yaml (document 2): ConfigMap "cm": field data:`) {
		t.Errorf("bad ConfigMap: got %v", err)
	}
}

func TestCheckReadsTheAnnotationOnlyInDirectMode(t *testing.T) {
	exe, dir := fakeHooks(t, `exit 0`)
	if err := (Runner{Exe: exe}).Check(context.Background(), vmi(), nil, "vmi.yaml"); err != nil {
		t.Fatal(err)
	}
	if args, _ := os.ReadFile(filepath.Join(dir, "args")); strings.TrimSpace(string(args)) != "--check" {
		t.Errorf("args %q", args)
	}
	refuse, _ := fakeHooks(t, `exit 1`)
	if err := (Runner{Exe: refuse, Sidecars: 1}).Check(context.Background(), vmi(), nil, "vmi.yaml"); err != nil {
		t.Errorf("KubeVirt mode: the pod's images are not the launcher's to check: %v", err)
	}
}

func TestNamed(t *testing.T) {
	if !Named(vmi()) || Named(&v1.VirtualMachineInstance{}) {
		t.Fatal("Named")
	}
}
