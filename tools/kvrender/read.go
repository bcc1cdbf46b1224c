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

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/kubevirtmode/vmexpand"
)

// machine is one VM or VMI document.
type machine struct {
	index int
	name  string
	vm    *v1.VirtualMachine
	vmi   *v1.VirtualMachineInstance
}

// fileDocs are the documents of one file that kvrender reads.
type fileDocs struct {
	machines   []machine
	objects    []metav1.Object
	configMaps []*k8sv1.ConfigMap
}

// objects are the instancetypes and preferences a VM may name and the
// ConfigMaps its hook sidecars may name, kept as lists so that a file's
// own can be added to --objects'.
type objects struct {
	list       []metav1.Object
	configMaps []*k8sv1.ConfigMap
}

// with returns the objects plus a file's own (which come first for
// ConfigMaps, as the launcher reads them).
func (o *objects) with(d *fileDocs) *objects {
	return &objects{
		list:       append(append([]metav1.Object{}, o.list...), d.objects...),
		configMaps: append(append([]*k8sv1.ConfigMap{}, d.configMaps...), o.configMaps...),
	}
}

func readObjectDirs(dirs []string) (*objects, error) {
	var list []metav1.Object
	var cms []*k8sv1.ConfigMap
	for _, dir := range dirs {
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
			cms = append(cms, d.configMaps...)
		}
	}
	return &objects{list: list, configMaps: cms}, nil
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
	switch {
	case tm.Kind == "VirtualMachine":
		vm := &v1.VirtualMachine{}
		if err := yaml.Unmarshal(doc, vm); err != nil {
			return err
		}
		d.machines = append(d.machines, machine{index: index, name: vm.Name, vm: vm})
	case tm.Kind == "VirtualMachineInstance":
		vmi := &v1.VirtualMachineInstance{}
		if err := yaml.Unmarshal(doc, vmi); err != nil {
			return err
		}
		d.machines = append(d.machines, machine{index: index, name: vmi.Name, vmi: vmi})
	case tm.Kind == "ConfigMap":
		cm := &k8sv1.ConfigMap{}
		if err := yaml.Unmarshal(doc, cm); err != nil {
			return err
		}
		d.configMaps = append(d.configMaps, cm)
	case vmexpand.IsObjectKind(tm.Kind):
		obj, err := vmexpand.DecodeObject(doc)
		if err != nil {
			return err
		}
		d.objects = append(d.objects, obj)
	}
	return nil
}
