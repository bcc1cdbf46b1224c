package vmexpand

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	v1 "kubevirt.io/api/core/v1"
	apiinstancetype "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/yaml"
)

// DefaultNamespace is where kubectl puts an object without a namespace.
const DefaultNamespace = "default"

// The kinds of the objects a VirtualMachine may name.
const (
	KindInstancetype        = "VirtualMachineInstancetype"
	KindClusterInstancetype = "VirtualMachineClusterInstancetype"
	KindPreference          = "VirtualMachinePreference"
	KindClusterPreference   = "VirtualMachineClusterPreference"
)

// IsObjectKind tells whether kind is one of the four kinds Objects holds.
func IsObjectKind(kind string) bool {
	switch kind {
	case KindInstancetype, KindClusterInstancetype, KindPreference, KindClusterPreference:
		return true
	}
	return false
}

// DecodeObject decodes one YAML or JSON document of one of the four kinds
// (instancetype.kubevirt.io/v1beta1), with the namespaced kinds put in
// DefaultNamespace when they name none, as kubectl would.
func DecodeObject(doc []byte) (metav1.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj metav1.Object
	switch tm.Kind {
	case KindInstancetype:
		obj = &v1beta1.VirtualMachineInstancetype{}
	case KindClusterInstancetype:
		obj = &v1beta1.VirtualMachineClusterInstancetype{}
	case KindPreference:
		obj = &v1beta1.VirtualMachinePreference{}
	case KindClusterPreference:
		obj = &v1beta1.VirtualMachineClusterPreference{}
	default:
		return nil, fmt.Errorf("kind %q is not an instancetype or a preference", tm.Kind)
	}
	if err := yaml.Unmarshal(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s: field metadata.name: must be set", tm.Kind)
	}
	if (tm.Kind == KindInstancetype || tm.Kind == KindPreference) && obj.GetNamespace() == "" {
		obj.SetNamespace(DefaultNamespace)
	}
	return obj, nil
}

// Objects are the instancetypes and preferences a VM may name, in the
// stores KubeVirt's finders read (the informers' stores in a cluster).
type Objects struct {
	instancetypes, clusterInstancetypes cache.Store
	preferences, clusterPreferences     cache.Store
}

// NewObjects puts the objects (from DecodeObject) into their stores; a
// later object of the same kind, namespace and name replaces an earlier one,
// as a second kubectl apply would.
func NewObjects(list ...metav1.Object) (*Objects, error) {
	o := &Objects{
		instancetypes:        cache.NewStore(cache.MetaNamespaceKeyFunc),
		clusterInstancetypes: cache.NewStore(cache.MetaNamespaceKeyFunc),
		preferences:          cache.NewStore(cache.MetaNamespaceKeyFunc),
		clusterPreferences:   cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	for _, obj := range list {
		var err error
		switch obj.(type) {
		case *v1beta1.VirtualMachineInstancetype:
			err = o.instancetypes.Add(obj)
		case *v1beta1.VirtualMachineClusterInstancetype:
			err = o.clusterInstancetypes.Add(obj)
		case *v1beta1.VirtualMachinePreference:
			err = o.preferences.Add(obj)
		case *v1beta1.VirtualMachineClusterPreference:
			err = o.clusterPreferences.Add(obj)
		default:
			err = fmt.Errorf("%T is not an instancetype or a preference", obj)
		}
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

// MissingError is a VM naming an instancetype or preference that is not
// among the Objects.
type MissingError struct {
	// Field is spec.instancetype or spec.preference.
	Field string
	// Kind and Name are the object's, Kind with KubeVirt's default (the
	// cluster-wide kind) when the VM names none.
	Kind, Name string
}

// Error implements error.
func (e *MissingError) Error() string {
	return fmt.Sprintf("field %s: %s %q not found", e.Field, e.Kind, e.Name)
}

// Check makes sure the instancetype and preference vm names are among the
// objects, so that a missing one is a MissingError naming its kind and
// name (KubeVirt's finders would ask the API server for it; its webhooks
// then let the VM in and its controller fails to start it). A kind that is
// none of these is left to KubeVirt's finders, which refuse it.
func (o *Objects) Check(vm *v1.VirtualMachine) error {
	ns := vm.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	type ref struct {
		field, kind, name string
		store             cache.Store
		key               string
	}
	var refs []ref
	if it := vm.Spec.Instancetype; it != nil && it.Name != "" {
		if isKind(it.Kind, apiinstancetype.SingularResourceName, apiinstancetype.PluralResourceName) {
			refs = append(refs, ref{"spec.instancetype", KindInstancetype, it.Name, o.instancetypes, ns + "/" + it.Name})
		} else if isKind(it.Kind, "", apiinstancetype.ClusterSingularResourceName, apiinstancetype.ClusterPluralResourceName) {
			refs = append(refs, ref{"spec.instancetype", KindClusterInstancetype, it.Name, o.clusterInstancetypes, it.Name})
		}
	}
	if p := vm.Spec.Preference; p != nil && p.Name != "" {
		if isKind(p.Kind, apiinstancetype.SingularPreferenceResourceName, apiinstancetype.PluralPreferenceResourceName) {
			refs = append(refs, ref{"spec.preference", KindPreference, p.Name, o.preferences, ns + "/" + p.Name})
		} else if isKind(p.Kind, "", apiinstancetype.ClusterSingularPreferenceResourceName, apiinstancetype.ClusterPluralPreferenceResourceName) {
			refs = append(refs, ref{"spec.preference", KindClusterPreference, p.Name, o.clusterPreferences, p.Name})
		}
	}
	for _, r := range refs {
		if _, ok, _ := r.store.GetByKey(r.key); !ok {
			return &MissingError{Field: r.field, Kind: r.kind, Name: r.name}
		}
	}
	return nil
}

// isKind compares a matcher's kind as KubeVirt's finders do (lower case,
// singular or plural resource name).
func isKind(kind string, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(kind, n) {
			return true
		}
	}
	return false
}
