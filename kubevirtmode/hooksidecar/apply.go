package hooksidecar

import (
	"encoding/xml"
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	cloudinit "kubevirt.io/kubevirt/pkg/cloud-init"
	"kubevirt.io/kubevirt/pkg/config"
	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

// Wait is how OnDefineDomain waits for the sidecars.
type Wait struct {
	// N sidecar sockets, within Timeout (virt-launcher's --qemu-timeout).
	N       uint
	Timeout time.Duration
	// Exited (may be nil) ends the wait early when a sidecar dies first.
	Exited <-chan error
	// Shutdown calls the Shutdown hook point after the define, for
	// sidecars that end with the launch (direct mode, kvrender); a pod's
	// sidecars get it when the launch ends (ShutdownPod).
	Shutdown bool
	// CloudInitWritten says the cloud-init disk exists already (the
	// launcher's converter wrote it), so a PreCloudInitIso hook that
	// changes its data is refused; without it (kvrender) the hooks'
	// answer is taken as virt-launcher takes it, and it is not in a domain.
	CloudInitWritten bool
}

// OnDefineDomain is virt-launcher's hook sequence with KubeVirt's own
// manager: it waits for the sidecar sockets in /var/run/kubevirt-hooks
// (Collect), calls the PreCloudInitIso hooks (preCloudInitIso), then passes
// the domain and the VMI to every OnDefineDomain hook in KubeVirt's order
// and returns the XML the last one returned, what virt-launcher defines;
// then, with w.Shutdown, the Shutdown hook point (v1alpha3 sidecars).
func OnDefineDomain(w Wait, domain *api.DomainSpec, vmi *v1.VirtualMachineInstance) (string, error) {
	m := hooks.GetManager()
	collected := make(chan error, 1)
	go func() { collected <- m.Collect(w.N, w.Timeout) }()
	select {
	case err := <-collected:
		if err != nil {
			return "", fmt.Errorf("waiting for %d hook sidecar sockets in %s: %w", w.N, hooks.HookSocketsSharedDirectory, err)
		}
	case err := <-w.Exited:
		return "", err
	}
	if err := preCloudInitIso(m, vmi, w.CloudInitWritten); err != nil {
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
	if w.Shutdown {
		if err := m.Shutdown(); err != nil {
			return "", fmt.Errorf("hook sidecar Shutdown: %w", err)
		}
	}
	return out, nil
}

// ShutdownPod is what virt-launcher does once the domain is gone: the
// Shutdown hook point of the pod's n sidecars (v1alpha3), so that they
// exit and the pod can end. The sockets are collected again, as this is
// another process than the one that defined the domain.
func ShutdownPod(n uint, timeout time.Duration) error {
	m := hooks.GetManager()
	if err := m.Collect(n, timeout); err != nil {
		return fmt.Errorf("collecting the %d hook sidecars for their Shutdown hook: %w", n, err)
	}
	return m.Shutdown()
}

// preCloudInitIso calls the PreCloudInitIso hooks as virt-launcher's
// preStartHook does, with the VMI's cloud-init data as KubeVirt reads it.
// When the cloud-init disk was written already (written), a hook that
// changes the user or network data is refused by name rather than dropped.
func preCloudInitIso(m hooks.Manager, vmi *v1.VirtualMachineInstance, written bool) error {
	data, err := cloudinit.ReadCloudInitVolumeDataSource(vmi, config.SecretSourceDir)
	if err != nil || data == nil {
		return err
	}
	user, network := data.UserData, data.NetworkData
	out, err := m.PreCloudInitIso(vmi, data)
	if err != nil {
		return fmt.Errorf("hook sidecar PreCloudInitIso: %w", err)
	}
	if written && (out == nil || out.UserData != user || out.NetworkData != network) {
		return fmt.Errorf("annotation %s: a PreCloudInitIso hook changed the cloud-init data of volume %q, which the launcher writes before the hooks run and does not rewrite: use an OnDefineDomain hook, or write the change into the volume", Annotation, data.VolumeName)
	}
	return nil
}
