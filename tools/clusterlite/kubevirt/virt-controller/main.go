// Command virt-controller runs KubeVirt's own virt-controller, linked from
// kubevirt.io/kubevirt v1.6.0, so that cluster-lite can run the real
// controller against a loopback API server without container images.
// Flags are KubeVirt's (see NOTES.md for the ones cluster-lite sets).
package main

import "kubevirt.io/kubevirt/pkg/virt-controller/watch"

func main() {
	watch.Execute()
}
