package clusterlite

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/kvmprobe"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

// WriteKubeVirtPKI issues virt-api's serving certificate (valid for the
// name the aggregator and the webhooks verify), its client certificate
// towards virt-handler, and virt-controller's metrics certificate, into dir, and returns
// the files by name: ca.crt, virt-api.crt/.key,
// virt-api-handler-client.crt/.key, virt-controller.crt/.key.
func (cp *ControlPlane) WriteKubeVirtPKI(dir string, ip net.IP) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	files := map[string][]byte{"ca.crt": cp.CAPEM()}
	var err error
	apiNames := []string{"virt-api", "virt-api.kubevirt", "virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local"}
	if files["virt-api.crt"], files["virt-api.key"], err = cp.IssueServingCert(apiNames, []net.IP{ip}); err != nil {
		return nil, fmt.Errorf("issuing virt-api's certificate: %w", err)
	}
	if files["virt-api-handler-client.crt"], files["virt-api-handler-client.key"], err = cp.IssueClientCert("kubevirt.io:system:client:virt-handler", nil); err != nil {
		return nil, fmt.Errorf("issuing virt-api's client certificate: %w", err)
	}
	if files["virt-controller.crt"], files["virt-controller.key"], err = cp.IssueServingCert([]string{"localhost", "virt-controller.kubevirt.svc"}, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return nil, fmt.Errorf("issuing virt-controller's certificate: %w", err)
	}
	return writeFiles(dir, files)
}

// writeFiles writes files (by name) into dir, readable by root only, and
// returns their paths by name.
func writeFiles(dir string, files map[string][]byte) (map[string]string, error) {
	paths := map[string]string{}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		paths[name] = p
	}
	return paths, nil
}

// WaitKubeVirtReady waits up to three minutes until virt-api serves the subresource API through
// the aggregator, virt-controller holds its leader lease, and the node is
// registered.
func (cp *ControlPlane) WaitKubeVirtReady(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	kv, err := kubecli.GetKubevirtClientFromRESTConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	checks := []struct {
		what string
		ok   func() (bool, string)
	}{
		{"virt-api serves subresources.kubevirt.io through the aggregator", func() (bool, string) {
			u, err := dyn.Resource(apiServices).Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			conds, _, _ := unstructuredSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Available" {
					return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
				}
			}
			return false, "no Available condition yet"
		}},
		{"virt-controller holds its leader lease", func() (bool, string) {
			l, err := kv.CoordinationV1().Leases("kubevirt").Get(ctx, "virt-controller", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder"
		}},
		{"the node is registered and Ready", func() (bool, string) {
			n, err := kv.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range n.Status.Conditions {
				if c.Type == k8sv1.NodeReady {
					return c.Status == k8sv1.ConditionTrue, string(c.Status)
				}
			}
			return false, "no Ready condition"
		}},
		{"virt-controller has started its controllers (KubeVirt object seen)", func() (bool, string) {
			_, err := kv.VirtualMachine(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
			return true, ""
		}},
	}
	for _, c := range checks {
		begin := time.Now()
		last := ""
		for {
			ok, why := c.ok()
			if ok {
				cp.log.Info("ready", "check", c.what, "after", time.Since(begin).Round(10*time.Millisecond))
				break
			}
			last = why
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting until %s: %w (last: %s)", c.what, ctx.Err(), last)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// unstructuredSlice reads a nested slice from an unstructured object.
func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[f]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// EmulationArgs are kubevirt-manifests' flags for a node without KVM for
// ordinary guests (kvmprobe's rule): the KubeVirt CR's
// developerConfiguration.useEmulation, so that virt-controller renders
// --allow-emulation in the compute command (KubeVirt mode's monitor then
// lets our launcher choose TCG) and requests no /dev/kvm, as on any
// KubeVirt install without KVM. None where the node has KVM, or unless
// wanted (KubeVirt mode wants it; direct mode ignores those flags).
func EmulationArgs(wanted bool, log *slog.Logger) []string {
	if !wanted {
		return nil
	}
	kvm, why, err := kvmprobe.Probe()
	if err != nil {
		log.Debug("could not read the host's virtualization support", "err", err)
	}
	if kvm {
		return nil
	}
	log.Info("no KVM for ordinary guests: the KubeVirt CR sets developerConfiguration.useEmulation", "why", why)
	return []string{"--use-emulation"}
}

// RuntimeChoice is what ChooseRuntime decides from.
type RuntimeChoice struct {
	// Mode is podman, process or auto.
	Mode string
	// Launcher is the bare launcher binary (for the log line).
	Launcher string
	// Image is the launcher image the pods name.
	Image string
	// NodeName labels the containers; leftovers of a killed stack with it
	// are removed.
	NodeName string
	// CacheDir becomes the containers' shared QEMU capability cache.
	CacheDir string
}

// ChooseRuntime picks how the node agent runs launcher pods
// (RuntimeChoice.Mode): podman when asked, or in auto mode when podman
// works here with an overlay store and has the launcher image; otherwise
// bare processes (nil), said once at warn level in auto mode. CacheDir
// becomes the containers' shared QEMU capability cache.
func ChooseRuntime(ctx context.Context, c RuntimeChoice, log *slog.Logger) (nodeagent.Runtime, error) {
	if c.Mode == "process" {
		log.Info("launcher pods run as bare processes", "launcher", c.Launcher, "why", "runtime process asked for")
		return nil, nil
	}
	// Containers get /dev/kvm only where the node runs ordinary guests
	// under KVM (the launcher's own rule).
	kvm, kvmWhy, err := kvmprobe.Probe()
	if err != nil {
		log.Debug("could not read the host's virtualization support", "err", err)
	}
	p := &nodeagent.Podman{CacheDir: c.CacheDir, KVM: kvm, Logger: log}
	err = p.Check(ctx, c.Image)
	if err == nil {
		err = p.RemoveLeftovers(ctx, c.NodeName)
	}
	if err == nil {
		err = os.MkdirAll(c.CacheDir, 0o755)
	}
	if err != nil {
		if c.Mode == "podman" {
			return nil, fmt.Errorf("launcher runtime podman: %w", err)
		}
		log.Warn("no container runtime works: launcher pods run as bare processes, without cgroup limits", "launcher", c.Launcher, "why", err)
		return nil, nil
	}
	log.Info("launcher pods run as podman containers", "image", c.Image, "kvm", p.KVM, "kvm_reason", kvmWhy)
	return p, nil
}
