package hooksidecar

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

func vmiWith(annotation string) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "v", Annotations: map[string]string{Annotation: annotation}}}
}

func TestResolveKnownImages(t *testing.T) {
	cms := ConfigMaps{"my-config-map": {"my_script.sh": "#!/bin/sh\ncat\n"}}
	for _, tc := range []struct {
		name, annotation string
		bins             map[string]string
		scripts          []string
	}{
		{"example image, any registry and tag", `[{"args": ["--version", "v1alpha2"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel"}]`,
			map[string]string{"onDefineDomain": "/b/smbios-onDefineDomain"}, nil},
		{"example image by digest", `[{"image": "quay.io/kubevirt/example-hook-sidecar@sha256:0123"}]`,
			map[string]string{"onDefineDomain": "/b/smbios-onDefineDomain"}, nil},
		{"the shim by name", `[{"image": "quay.io/kubevirt/sidecar-shim:v1.6.0", "configMap": {"name": "my-config-map", "key": "my_script.sh", "hookPath": "/usr/bin/onDefineDomain"}}]`,
			map[string]string{}, []string{"onDefineDomain"}},
		{"configMap without image: the shim", `[{"args": ["--version", "v1alpha3"], "configMap": {"name": "my-config-map", "key": "my_script.sh", "hookPath": "/usr/bin/preCloudInitIso"}}]`,
			map[string]string{}, []string{"preCloudInitIso"}},
		{"a configMap script replaces the image's own hook", `[{"image": "kubevirt/example-hook-sidecar", "configMap": {"name": "my-config-map", "key": "my_script.sh", "hookPath": "/usr/bin/onDefineDomain"}}]`,
			map[string]string{}, []string{"onDefineDomain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := Resolve(vmiWith(tc.annotation), "/b", cms)
			if err != nil {
				t.Fatal(err)
			}
			if len(specs) != 1 {
				t.Fatalf("%d specs", len(specs))
			}
			s := specs[0]
			if s.Name != "hook-sidecar-0" || s.Exe != "/b/sidecar-shim" {
				t.Errorf("name %q exe %q", s.Name, s.Exe)
			}
			if len(s.Bins) != len(tc.bins) {
				t.Errorf("bins %v, want %v", s.Bins, tc.bins)
			}
			for k, v := range tc.bins {
				if s.Bins[k] != v {
					t.Errorf("bins %v, want %v", s.Bins, tc.bins)
				}
			}
			for _, name := range tc.scripts {
				if s.Scripts[name] != cms["my-config-map"]["my_script.sh"] {
					t.Errorf("scripts %v: want %s from the ConfigMap", s.Scripts, name)
				}
			}
		})
	}
}

func TestResolveNamesWhatIsWrong(t *testing.T) {
	cms := ConfigMaps{"cm": {"k": "#!/bin/sh\n"}}
	for _, tc := range []struct{ annotation, want string }{
		{`not json`, "annotation hooks.kubevirt.io/hookSidecars: invalid character"},
		{`[{"image": "quay.io/someone/my-sidecar:1"}]`, `sidecar 0: field image: "quay.io/someone/my-sidecar:1" is not an image this launcher runs`},
		{`[{"image": "kubevirt/sidecar-shim"}, {"image": "kubevirt/example-hook-sidecar", "command": ["/bin/x"]}]`, "sidecar 1: field command: not run here"},
		{`[{"image": "kubevirt/sidecar-shim", "pvc": {"name": "p", "volumePath": "/v"}}]`, "sidecar 0: field pvc: not run here"},
		{`[{"args": ["--version", "v1alpha2"]}]`, "sidecar 0: field image: must be set"},
		{`[{"configMap": {"name": "other", "key": "k", "hookPath": "/usr/bin/onDefineDomain"}}]`, `field configMap.name: ConfigMap "other" not found`},
		{`[{"configMap": {"name": "cm", "key": "nokey", "hookPath": "/usr/bin/onDefineDomain"}}]`, `field configMap.key: ConfigMap "cm" has no key "nokey"`},
		{`[{"configMap": {"name": "cm", "key": "k", "hookPath": "/usr/bin/myhook"}}]`, `field configMap.hookPath: "/usr/bin/myhook": sidecar-shim runs only onDefineDomain or preCloudInitIso`},
	} {
		_, err := Resolve(vmiWith(tc.annotation), "/b", cms)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line with %q", tc.annotation, err, tc.want)
		}
	}
}

func TestResolveWithoutTheAnnotation(t *testing.T) {
	specs, err := Resolve(&v1.VirtualMachineInstance{}, "/b", nil)
	if err != nil || len(specs) != 0 {
		t.Fatalf("specs %v, err %v", specs, err)
	}
}
