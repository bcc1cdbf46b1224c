package manifest

import (
	"sort"
	"strings"
)

// clusterMetadata are the metadata fields the API server sets on a live
// object. A manifest saved from a cluster (`kubectl get vmi NAME -o yaml`)
// carries them; the launcher has no use for them, so they are dropped
// before the strict check, and reported. metadata.uid is not among them:
// it is kept, as the VMI's identity (cloud-init instance-id, domain UUID).
var clusterMetadata = []string{
	"creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp",
	"finalizers", "generateName", "generation", "managedFields",
	"ownerReferences", "resourceVersion", "selfLink",
}

// stripCluster removes what the API server and KubeVirt add to a live
// object from raw (an object with metadata, and status at the top level)
// and returns the paths it removed or found, prefixed with prefix. The
// kubevirt.io/* labels and annotations stay in the object (some, like
// KubeVirt's functional-test annotations, are read by the launcher) but are
// reported, since a launch does nothing else with them; vmi says raw's
// metadata is the VMI's (a VMI, or a VM's template), where the hook
// sidecar annotation acts and, when it is there, the sidecars may read any
// annotation, so none is reported.
func stripCluster(raw map[string]any, prefix string, vmi bool) []string {
	var found []string
	if _, ok := raw["status"]; ok {
		delete(raw, "status")
		found = append(found, prefix+"status")
	}
	meta, ok := raw["metadata"].(map[string]any)
	if !ok {
		return found
	}
	for _, f := range clusterMetadata {
		if _, ok := meta[f]; ok {
			if meta[f] != nil {
				found = append(found, prefix+"metadata."+f)
			}
			delete(meta, f)
		}
	}
	for _, set := range []string{"labels", "annotations"} {
		m, _ := meta[set].(map[string]any)
		if _, sidecars := m[HookSidecarsAnnotation]; vmi && set == "annotations" && sidecars {
			continue
		}
		for k := range m {
			if isKubeVirtKey(k) && !strings.HasPrefix(k, "kubevirt.io/func-test-") {
				found = append(found, prefix+"metadata."+set+"["+k+"]")
			}
		}
	}
	sort.Strings(found)
	return found
}

// HookSidecarsAnnotation names KubeVirt's hook sidecars on a VMI (a VM's
// template): containers whose hooks rewrite the domain, which the
// converter stage runs through virt-launcher-hooks (pkg/hooksexec).
const HookSidecarsAnnotation = "hooks.kubevirt.io/hookSidecars"

// isKubeVirtKey tells a label or annotation KubeVirt sets (kubevirt.io/...
// or a kubevirt.io subdomain such as vm.kubevirt.io/...).
func isKubeVirtKey(k string) bool {
	domain, _, ok := strings.Cut(k, "/")
	return ok && (domain == "kubevirt.io" || strings.HasSuffix(domain, ".kubevirt.io"))
}
