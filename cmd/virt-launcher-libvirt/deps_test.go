package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStagesLinkOnlyWhatTheyNeed keeps the launcher's split honest: the
// light front links neither libvirt nor the KubeVirt types (the crash
// paths stay a few milliseconds), the converter links no libvirt, and the
// libvirt runner, the process that stays beside the guest, links none of
// the Kubernetes, KubeVirt, YAML, container-image or HTTP code.
func TestStagesLinkOnlyWhatTheyNeed(t *testing.T) {
	libvirt := []string{"libvirt.org/go/libvirt"}
	kube := []string{"k8s.io/api/", "k8s.io/apimachinery/", "kubevirt.io/", "sigs.k8s.io/yaml", "go.podman.io/", "net/http"}
	for _, c := range []struct {
		pkg       string
		forbidden []string
	}{
		{"../virt-launcher", append(append([]string{}, libvirt...), "k8s.io/api/", "kubevirt.io/", "go.podman.io/")},
		{"../virt-launcher-convert", libvirt},
		{".", kube},
	} {
		out, err := exec.Command("go", "list", "-deps", c.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", c.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range c.forbidden {
				if dep == f || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/") {
					t.Errorf("%s links %s (forbidden: %s)", c.pkg, dep, f)
				}
			}
		}
	}
}
