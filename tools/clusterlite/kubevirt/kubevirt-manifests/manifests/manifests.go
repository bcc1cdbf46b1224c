// Package manifests generates, from KubeVirt v1.6.0's own operator code, the
// objects a bare kube-apiserver needs before KubeVirt's virt-controller and
// virt-api can run against it, and writes or applies them.
package manifests

import (
	"fmt"
	"runtime"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/install"
	operatorutil "kubevirt.io/kubevirt/pkg/virt-operator/util"
)

// KubeVirtVersion is the KubeVirt release these manifests and the linked
// binaries come from; it is recorded in the KubeVirt CR's status. It is a
// variable so that tools/clusterlite/build.sh can set it (-ldflags -X) when
// it builds another release or a local checkout (KUBEVIRT_VERSION,
// KUBEVIRT_SRC); the committed module is v1.6.0.
var KubeVirtVersion = "v1.6.0"

// deploymentID is the install-strategy ID written as both observed and
// target deployment ID; virt-controller's workload updater only compares
// the two (pkg/virt-controller/watch/workload-updater/workload-updater.go).
const deploymentID = "clusterlite"

// Options says how to fill in what virt-operator would fill in at runtime.
type Options struct {
	// Namespace is where KubeVirt runs. virt-api and virt-controller read
	// it from the pod's service-account namespace file and fall back to
	// "kubevirt", so outside a pod it must be "kubevirt".
	Namespace string
	// VirtAPIServiceIP is the fixed clusterIP of the virt-api Service.
	VirtAPIServiceIP string
	// VirtAPIServicePort is the virt-api Service port that the
	// aggregator and the webhooks dial.
	VirtAPIServicePort int
	// VirtAPITargetPort is the Service's targetPort. The Service has no
	// selector, so only the Endpoints below say where virt-api listens.
	VirtAPITargetPort int
	// VirtAPIEndpointIP and VirtAPIEndpointPort are where virt-api really
	// listens, written into the virt-api Endpoints. The aggregator refuses
	// an APIService whose Service has no Endpoints with an address even
	// when it dials the cluster IP, and no kube-controller-manager runs to
	// write them. Loopback addresses are rejected by Endpoints validation.
	VirtAPIEndpointIP   string
	VirtAPIEndpointPort int
	// CABundle is the PEM CA that signed virt-api's serving certificate.
	CABundle []byte
	// LauncherImage is recorded in the KubeVirt status deployment config.
	LauncherImage string
	// Webhooks includes virt-api's admission webhook configurations.
	Webhooks bool
	// FeatureGates go into the KubeVirt CR's developerConfiguration.
	FeatureGates []string
	// UseEmulation sets developerConfiguration.useEmulation, which makes
	// virt-controller start virt-launcher with --allow-emulation and not
	// request the devices.kubevirt.io/kvm resource: the machines this
	// project runs on have no usable hardware KVM.
	UseEmulation bool
}

// DefaultOptions returns the cluster-lite defaults.
func DefaultOptions() Options {
	return Options{
		Namespace:          "kubevirt",
		VirtAPIServiceIP:   "10.254.0.10",
		VirtAPIServicePort: 443,
		VirtAPITargetPort:  443,
		// Empty: the same as VirtAPIServiceIP and VirtAPIServicePort.
		VirtAPIEndpointIP:   "",
		VirtAPIEndpointPort: 0,
		LauncherImage:       "virt-launcher",
		Webhooks:            true,
		UseEmulation:        true,
	}
}

// Objects returns the objects in the order they must be created: the
// namespace, the CRDs (KubeVirt's own first), the kubevirt-ca ConfigMap,
// the virt-api Service, the subresources APIServices, the KubeVirt CR (with
// its status) and, if asked for, virt-api's webhook configurations.
func Objects(opts Options) ([]k8sruntime.Object, error) {
	cfg := &operatorutil.KubeVirtDeploymentConfig{
		ID:                deploymentID,
		Namespace:         opts.Namespace,
		KubeVirtVersion:   KubeVirtVersion,
		VirtLauncherImage: opts.LauncherImage,
	}
	strategy, err := install.GenerateCurrentInstallStrategy(cfg, "", opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("generate KubeVirt install strategy: %w", err)
	}

	objs := []k8sruntime.Object{&corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace},
	}}

	kvCRD, err := components.NewKubeVirtCrd()
	if err != nil {
		return nil, fmt.Errorf("generate KubeVirt CRD: %w", err)
	}
	objs = append(objs, kvCRD)
	for _, crd := range strategy.CRDs() {
		objs = append(objs, crd)
	}

	seen := map[string]bool{}
	for _, cm := range strategy.ConfigMaps() {
		if cm.Name != components.KubeVirtCASecretName || seen[cm.Name] {
			continue
		}
		seen[cm.Name] = true
		cm = cm.DeepCopy()
		cm.Data = map[string]string{components.CABundleKey: string(opts.CABundle)}
		objs = append(objs, cm)
	}

	for _, svc := range strategy.Services() {
		if svc.Name != components.VirtAPIName {
			continue
		}
		svc = svc.DeepCopy()
		// Selectorless, so that manual Endpoints stay authoritative should
		// an endpoints controller ever run.
		svc.Spec.Selector = nil
		svc.Spec.ClusterIP = opts.VirtAPIServiceIP
		svc.Spec.ClusterIPs = []string{opts.VirtAPIServiceIP}
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].Port = int32(opts.VirtAPIServicePort)
			svc.Spec.Ports[i].TargetPort.IntVal = int32(opts.VirtAPITargetPort)
		}
		objs = append(objs, svc, virtAPIEndpoints(svc, opts))
	}

	for _, as := range strategy.APIServices() {
		as = as.DeepCopy()
		as.Spec.CABundle = opts.CABundle
		port := int32(opts.VirtAPIServicePort)
		as.Spec.Service.Port = &port
		objs = append(objs, as)
	}

	kv, err := kubeVirt(opts, cfg)
	if err != nil {
		return nil, err
	}
	objs = append(objs, kv)

	if opts.Webhooks {
		port := int32(opts.VirtAPIServicePort)
		for _, w := range strategy.MutatingWebhookConfigurations() {
			w = w.DeepCopy()
			for i := range w.Webhooks {
				setClientConfig(&w.Webhooks[i].ClientConfig, opts.CABundle, port)
			}
			objs = append(objs, w)
		}
		for _, w := range strategy.ValidatingWebhookConfigurations() {
			// virt-operator's own validator guards the KubeVirt CR; no
			// operator runs here, so only virt-api's webhooks are kept.
			if w.Name != components.VirtAPIValidatingWebhookName {
				continue
			}
			w = w.DeepCopy()
			for i := range w.Webhooks {
				setClientConfig(&w.Webhooks[i].ClientConfig, opts.CABundle, port)
			}
			objs = append(objs, w)
		}
	}
	return objs, nil
}

// virtAPIEndpoints returns the Endpoints of the virt-api Service, with one
// port per Service port and the same (empty) port name, which is how the
// aggregator's availability check matches them.
func virtAPIEndpoints(svc *corev1.Service, opts Options) *corev1.Endpoints {
	ip, port := opts.VirtAPIEndpointIP, opts.VirtAPIEndpointPort
	if ip == "" {
		ip = opts.VirtAPIServiceIP
	}
	if port == 0 {
		port = opts.VirtAPIServicePort
	}
	ep := &corev1.Endpoints{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"},
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: svc.Labels},
	}
	subset := corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: ip}}}
	for _, p := range svc.Spec.Ports {
		subset.Ports = append(subset.Ports, corev1.EndpointPort{Name: p.Name, Port: int32(port), Protocol: p.Protocol})
	}
	ep.Subsets = []corev1.EndpointSubset{subset}
	return ep
}

func setClientConfig(cc *admissionregistrationv1.WebhookClientConfig, caBundle []byte, port int32) {
	cc.CABundle = caBundle
	if cc.Service != nil {
		cc.Service.Port = &port
	}
}

// kubeVirt returns the KubeVirt CR with the status virt-operator would give
// it once deployed: virt-controller and virt-api ignore a KubeVirt CR whose
// status.phase is empty (pkg/virt-config/configuration.go:357) and take the
// default architecture from status.defaultArchitecture.
func kubeVirt(opts Options, cfg *operatorutil.KubeVirtDeploymentConfig) (*v1.KubeVirt, error) {
	cfgJSON, err := cfg.GetJson()
	if err != nil {
		return nil, fmt.Errorf("encode deployment config: %w", err)
	}
	kv := &v1.KubeVirt{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "KubeVirt"},
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: opts.Namespace},
		Spec: v1.KubeVirtSpec{
			ImageTag: KubeVirtVersion,
			Configuration: v1.KubeVirtConfiguration{
				DeveloperConfiguration: &v1.DeveloperConfiguration{
					FeatureGates: slices.Clone(opts.FeatureGates),
					UseEmulation: opts.UseEmulation,
				},
			},
		},
		Status: v1.KubeVirtStatus{
			Phase: v1.KubeVirtPhaseDeployed,
			Conditions: []v1.KubeVirtCondition{{
				Type:    v1.KubeVirtConditionAvailable,
				Status:  corev1.ConditionTrue,
				Reason:  "AllComponentsReady",
				Message: "cluster-lite runs virt-controller and virt-api directly",
			}},
			OperatorVersion:          KubeVirtVersion,
			TargetKubeVirtVersion:    KubeVirtVersion,
			ObservedKubeVirtVersion:  KubeVirtVersion,
			TargetDeploymentConfig:   cfgJSON,
			ObservedDeploymentConfig: cfgJSON,
			TargetDeploymentID:       deploymentID,
			ObservedDeploymentID:     deploymentID,
			DefaultArchitecture:      runtime.GOARCH,
		},
	}
	return kv, nil
}
