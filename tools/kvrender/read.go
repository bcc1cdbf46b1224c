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
	machines []machine
	objects  []metav1.Object
}

// objects are the instancetypes and preferences a VM may name, kept as a
// list so that a file's own can be added to --objects'.
type objects struct{ list []metav1.Object }

// with returns the objects plus more (a file's own).
func (o *objects) with(more []metav1.Object) *objects {
	return &objects{list: append(append([]metav1.Object{}, o.list...), more...)}
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
	return &objects{list: list}, nil
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
	case vmexpand.IsObjectKind(tm.Kind):
		obj, err := vmexpand.DecodeObject(doc)
		if err != nil {
			return err
		}
		d.objects = append(d.objects, obj)
	}
	return nil
}
