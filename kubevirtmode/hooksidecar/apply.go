package hooksidecar

import (
	"encoding/xml"
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

// OnDefineDomain is virt-launcher's hook sequence with KubeVirt's own
// manager: it waits for n sidecar sockets in /var/run/kubevirt-hooks
// (Collect, with KubeVirt's timeout), then passes the domain and the VMI
// to every OnDefineDomain hook in KubeVirt's order and returns the XML the
// last one returned, what virt-launcher defines; then the Shutdown hook
// point (v1alpha3 sidecars). exited (may be nil) ends the wait early when
// a sidecar dies first.
func OnDefineDomain(n uint, timeout time.Duration, exited <-chan error, domain *api.DomainSpec, vmi *v1.VirtualMachineInstance) (string, error) {
	m := hooks.GetManager()
	collected := make(chan error, 1)
	go func() { collected <- m.Collect(n, timeout) }()
	select {
	case err := <-collected:
		if err != nil {
			return "", fmt.Errorf("waiting for %d hook sidecar sockets in %s: %w", n, hooks.HookSocketsSharedDirectory, err)
		}
	case err := <-exited:
		return "", err
	}
	out, err := m.OnDefineDomain(domain, vmi)
	if err != nil {
		return "", fmt.Errorf("hook sidecar OnDefineDomain: %w", err)
	}
	// KubeVirt reads the hooks' XML back into its domain type before it
	// defines it (util.SetDomainSpecStrWithHooks): XML it cannot read fails
	// there too.
	if err := xml.Unmarshal([]byte(out), &api.DomainSpec{}); err != nil {
		return "", fmt.Errorf("hook sidecar OnDefineDomain returned XML KubeVirt cannot read: %w", err)
	}
	if err := m.Shutdown(); err != nil {
		return "", fmt.Errorf("hook sidecar Shutdown: %w", err)
	}
	return out, nil
}
