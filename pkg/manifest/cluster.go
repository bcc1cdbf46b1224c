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
// reported, since a launch does nothing else with them.
func stripCluster(raw map[string]any, prefix string) []string {
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
		for k := range m {
			if _, refused := refusedAnnotations[k]; isKubeVirtKey(k) && !refused && !strings.HasPrefix(k, "kubevirt.io/func-test-") {
				found = append(found, prefix+"metadata."+set+"["+k+"]")
			}
		}
	}
	sort.Strings(found)
	return found
}

// refusedAnnotations are KubeVirt annotations that would change the VM in
// ways a launch cannot follow, with the reason.
var refusedAnnotations = map[string]string{
	"hooks.kubevirt.io/hookSidecars": "sidecar hooks are containers that rewrite the domain; the launcher runs no sidecars (remove the annotation, or write the change into the spec)",
}

// refusedAnnotation returns the path and reason of the first refused
// annotation in an object's metadata, prefixed with prefix.
func refusedAnnotation(raw map[string]any, prefix string) (string, string) {
	meta, _ := raw["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	for k, why := range refusedAnnotations {
		if _, ok := ann[k]; ok {
			return prefix + "metadata.annotations[" + k + "]", why
		}
	}
	return "", ""
}

// isKubeVirtKey tells a label or annotation KubeVirt sets (kubevirt.io/...
// or a kubevirt.io subdomain such as vm.kubevirt.io/...).
func isKubeVirtKey(k string) bool {
	domain, _, ok := strings.Cut(k, "/")
	return ok && (domain == "kubevirt.io" || strings.HasSuffix(domain, ".kubevirt.io"))
}
