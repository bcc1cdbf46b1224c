package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// fieldManager names cluster-lite as the owner of the applied fields.
const fieldManager = "clusterlite-kubevirt-manifests"

// toUnstructured converts a typed object (with its TypeMeta set) into the
// generic form used for output and for the dynamic client, dropping the
// empty status and creationTimestamp that typed objects always carry.
func toUnstructured(obj k8sruntime.Object) (*unstructured.Unstructured, error) {
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if st, ok := u.Object["status"].(map[string]any); ok && len(st) == 0 {
		delete(u.Object, "status")
	}
	if u.GetKind() == "CustomResourceDefinition" {
		// The generated CRDs carry an empty status (storedVersions: null)
		// that only the API server may fill in.
		delete(u.Object, "status")
	}
	return u, nil
}

// Write prints objs as a YAML stream ("yaml") or as one JSON v1 List
// ("json").
func Write(w io.Writer, objs []k8sruntime.Object, format string) error {
	items := make([]any, 0, len(objs))
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return err
		}
		items = append(items, u.Object)
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}); err != nil {
			return fmt.Errorf("encode JSON list: %w", err)
		}
		return nil
	case "yaml":
		for _, item := range items {
			b, err := yaml.Marshal(item)
			if err != nil {
				return fmt.Errorf("encode YAML: %w", err)
			}
			if _, err := fmt.Fprintf(w, "---\n%s", b); err != nil {
				return fmt.Errorf("write YAML: %w", err)
			}
		}
		return nil
	default:
		return fmt.Errorf("unknown output format %q (want yaml or json)", format)
	}
}

// Apply server-side-applies objs in order to the API server of kubeconfig.
// After the CRDs it waits until they are established and refreshes its
// discovery, and it applies a status, where an object has one, through the
// status subresource (the KubeVirt CR's status is what makes KubeVirt's
// components accept it).
func Apply(ctx context.Context, kubeconfig string, objs []k8sruntime.Object, logger *slog.Logger) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(disc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)

	var crds []string
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return err
		}
		if u.GetKind() != "CustomResourceDefinition" && len(crds) > 0 {
			if err := waitEstablished(ctx, dyn, crds); err != nil {
				return err
			}
			crds = nil
			mapper.Reset()
		}
		if err := applyOne(ctx, dyn, mapper, u); err != nil {
			return err
		}
		logger.Info("applied", "kind", u.GetKind(), "namespace", u.GetNamespace(), "name", u.GetName())
		if u.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, u.GetName())
		}
	}
	return nil
}

func applyOne(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("map %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
	}
	status, hasStatus := u.Object["status"]
	body, err := json.Marshal(u.Object)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force}
	if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, opts); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
	}
	if !hasStatus {
		return nil
	}
	statusBody, err := json.Marshal(map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
		"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
		"status":   status,
	})
	if err != nil {
		return fmt.Errorf("encode status of %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, statusBody, opts, "status"); err != nil {
		return fmt.Errorf("apply status of %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, names []string) error {
	crdRes := extv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(crdRes).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("get CRD %s: %w", name, err)
			}
			var crd extv1.CustomResourceDefinition
			if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
				return false, fmt.Errorf("decode CRD %s: %w", name, err)
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == extv1.Established && c.Status == extv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("wait for CRD %s to be established: %w", name, err)
		}
	}
	return nil
}
