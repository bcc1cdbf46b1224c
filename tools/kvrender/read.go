package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/yaml"
)

// defaultNamespace is where kubectl puts an object without a namespace.
const defaultNamespace = "default"

// machine is one VM or VMI document.
type machine struct {
	index int
	name  string
	vm    *v1.VirtualMachine
	vmi   *v1.VirtualMachineInstance
}

// fileDocs are the documents of one file that kvrender reads.
type fileDocs struct {
	machines []machine
	objects  []metav1.Object
}

// objects are the instancetypes and preferences a VM may name, in the
// stores KubeVirt's finders read.
type objects struct {
	instancetypes, clusterInstancetypes cache.Store
	preferences, clusterPreferences     cache.Store
	list                                []metav1.Object
}

func newObjects(list []metav1.Object) (*objects, error) {
	o := &objects{
		instancetypes:        cache.NewStore(cache.MetaNamespaceKeyFunc),
		clusterInstancetypes: cache.NewStore(cache.MetaNamespaceKeyFunc),
		preferences:          cache.NewStore(cache.MetaNamespaceKeyFunc),
		clusterPreferences:   cache.NewStore(cache.MetaNamespaceKeyFunc),
		list:                 list,
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
		}
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

// with returns the objects plus more (a file's own).
func (o *objects) with(more []metav1.Object) *objects {
	n, err := newObjects(append(append([]metav1.Object{}, o.list...), more...))
	if err != nil {
		panic(err) // MetaNamespaceKeyFunc fails only for objects without metadata
	}
	return n
}

func readObjectDir(dir string) (*objects, error) {
	var list []metav1.Object
	if dir != "" {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			d, err := readFile(f)
			if err != nil {
				return nil, err
			}
			list = append(list, d.objects...)
		}
	}
	return newObjects(list)
}

func readFile(path string) (*fileDocs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	out := &fileDocs{}
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if strings.TrimSpace(string(doc)) == "" {
			continue
		}
		if err := out.add(i, doc); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
	}
}

func (d *fileDocs) add(index int, doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var obj metav1.Object
	switch tm.Kind {
	case "VirtualMachine":
		vm := &v1.VirtualMachine{}
		obj = vm
		d.machines = append(d.machines, machine{index: index, vm: vm})
	case "VirtualMachineInstance":
		vmi := &v1.VirtualMachineInstance{}
		obj = vmi
		d.machines = append(d.machines, machine{index: index, vmi: vmi})
	case "VirtualMachineInstancetype":
		obj = &v1beta1.VirtualMachineInstancetype{}
	case "VirtualMachineClusterInstancetype":
		obj = &v1beta1.VirtualMachineClusterInstancetype{}
	case "VirtualMachinePreference":
		obj = &v1beta1.VirtualMachinePreference{}
	case "VirtualMachineClusterPreference":
		obj = &v1beta1.VirtualMachineClusterPreference{}
	default:
		return nil
	}
	if err := yaml.Unmarshal(doc, obj); err != nil {
		return err
	}
	switch obj.(type) {
	case *v1beta1.VirtualMachineClusterInstancetype, *v1beta1.VirtualMachineClusterPreference:
	default:
		if obj.GetNamespace() == "" {
			obj.SetNamespace(defaultNamespace)
		}
	}
	if n := len(d.machines); n > 0 && d.machines[n-1].index == index {
		d.machines[n-1].name = obj.GetName()
	} else {
		d.objects = append(d.objects, obj)
	}
	return nil
}

// check makes sure the instancetype and preference a VM names are known, so
// that a missing one is an error naming its kind and name (KubeVirt's
// finders would ask the API server for it).
func (o *objects) check(vm *v1.VirtualMachine) error {
	type ref struct {
		kind, name string
		store      cache.Store
		key        string
	}
	var refs []ref
	if it := vm.Spec.Instancetype; it != nil {
		if strings.EqualFold(it.Kind, "VirtualMachineInstancetype") || strings.EqualFold(it.Kind, "VirtualMachineInstancetypes") {
			refs = append(refs, ref{"VirtualMachineInstancetype", it.Name, o.instancetypes, vm.Namespace + "/" + it.Name})
		} else {
			refs = append(refs, ref{"VirtualMachineClusterInstancetype", it.Name, o.clusterInstancetypes, it.Name})
		}
	}
	if p := vm.Spec.Preference; p != nil {
		if strings.EqualFold(p.Kind, "VirtualMachinePreference") || strings.EqualFold(p.Kind, "VirtualMachinePreferences") {
			refs = append(refs, ref{"VirtualMachinePreference", p.Name, o.preferences, vm.Namespace + "/" + p.Name})
		} else {
			refs = append(refs, ref{"VirtualMachineClusterPreference", p.Name, o.clusterPreferences, p.Name})
		}
	}
	for _, r := range refs {
		if _, ok, _ := r.store.GetByKey(r.key); !ok {
			return fmt.Errorf("%s %q is not in the file nor in --objects", r.kind, r.name)
		}
	}
	return nil
}
