package manifests

import (
	"bytes"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	v1 "kubevirt.io/api/core/v1"
)

func TestObjectsFillInWhatTheOperatorWould(t *testing.T) {
	opts := DefaultOptions()
	opts.CABundle = []byte("CA PEM")
	objs, err := Objects(opts)
	if err != nil {
		t.Fatalf("Objects: %v", err)
	}

	var crds, apiServices, webhooks int
	var kv *v1.KubeVirt
	var svc *corev1.Service
	var ep *corev1.Endpoints
	for _, o := range objs {
		switch o := o.(type) {
		case *extv1.CustomResourceDefinition:
			crds++
		case *apiregv1.APIService:
			apiServices++
			if string(o.Spec.CABundle) != "CA PEM" || o.Spec.Service.Port == nil || *o.Spec.Service.Port != 443 {
				t.Errorf("APIService %s: caBundle %q, service %+v", o.Name, o.Spec.CABundle, o.Spec.Service)
			}
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			webhooks++
			for _, w := range o.Webhooks {
				if string(w.ClientConfig.CABundle) != "CA PEM" {
					t.Errorf("webhook %s has no CA bundle", w.Name)
				}
			}
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			webhooks++
			if o.Name != "virt-api-validator" {
				t.Errorf("unexpected validating webhook configuration %s", o.Name)
			}
		case *v1.KubeVirt:
			kv = o
		case *corev1.Service:
			svc = o
		case *corev1.Endpoints:
			ep = o
		}
	}
	if _, first := objs[0].(*corev1.Namespace); !first {
		t.Errorf("first object is %T, want the Namespace", objs[0])
	}
	if crds < 17 {
		t.Errorf("got %d CRDs, want at least 17", crds)
	}
	if apiServices != 2 || webhooks != 2 {
		t.Errorf("got %d APIServices and %d webhook configurations, want 2 and 2", apiServices, webhooks)
	}
	if kv == nil || kv.Status.Phase != v1.KubeVirtPhaseDeployed || kv.Status.DefaultArchitecture == "" ||
		!kv.Spec.Configuration.DeveloperConfiguration.UseEmulation {
		t.Errorf("KubeVirt CR not as virt-controller needs it: %+v", kv)
	}
	if svc == nil || svc.Spec.ClusterIP != "10.254.0.10" || svc.Spec.Selector != nil {
		t.Errorf("virt-api Service: %+v", svc)
	}
	if ep == nil || ep.Subsets[0].Addresses[0].IP != "10.254.0.10" || ep.Subsets[0].Ports[0].Port != 443 {
		t.Errorf("virt-api Endpoints: %+v", ep)
	}
}

func TestWithoutWebhooks(t *testing.T) {
	opts := DefaultOptions()
	opts.Webhooks = false
	objs, err := Objects(opts)
	if err != nil {
		t.Fatalf("Objects: %v", err)
	}
	for _, o := range objs {
		switch o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration:
			t.Errorf("webhook configuration %T present with Webhooks=false", o)
		}
	}
}

func TestWriteYAMLAndJSON(t *testing.T) {
	objs := []k8sruntime.Object{&corev1.Namespace{}}
	objs[0].(*corev1.Namespace).APIVersion, objs[0].(*corev1.Namespace).Kind = "v1", "Namespace"
	objs[0].(*corev1.Namespace).Name = "kubevirt"

	var y bytes.Buffer
	if err := Write(&y, objs, "yaml"); err != nil {
		t.Fatalf("Write yaml: %v", err)
	}
	if !strings.HasPrefix(y.String(), "---\n") || strings.Contains(y.String(), "creationTimestamp") {
		t.Errorf("YAML stream:\n%s", y.String())
	}
	var j bytes.Buffer
	if err := Write(&j, objs, "json"); err != nil {
		t.Fatalf("Write json: %v", err)
	}
	if !strings.Contains(j.String(), `"kind": "List"`) {
		t.Errorf("JSON list:\n%s", j.String())
	}
	if err := Write(&j, objs, "toml"); err == nil {
		t.Error("Write accepted an unknown format")
	}
}
