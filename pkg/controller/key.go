package controller

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"
)

// Key names a VirtualMachine: its namespace and name.
type Key struct {
	// Namespace is the VM's namespace ("default" when the manifest has none).
	Namespace string
	// Name is the VM's metadata.name.
	Name string
}

// KeyOf returns the key of vm.
func KeyOf(vm *v1.VirtualMachine) Key { return Key{Namespace: vm.Namespace, Name: vm.Name} }

// ParseKey reads "name" (namespace "default") or "namespace/name".
func ParseKey(s string) (Key, error) {
	ns, name, found := strings.Cut(s, "/")
	if !found {
		ns, name = "default", s
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return Key{}, fmt.Errorf("VM name %q: want NAME or NAMESPACE/NAME", s)
	}
	return Key{Namespace: ns, Name: name}, nil
}

// String returns "namespace/name".
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// fileName is the key as one path element. Namespaces and names are DNS-1123
// labels or subdomains, which have no "_", so the mapping is unambiguous.
func (k Key) fileName() string { return k.Namespace + "_" + k.Name }
