// Command virt-launcher-expand is the launcher's expansion of instancetypes
// and preferences, with KubeVirt v1.6.0's own code (package vmexpand): it
// reads a VirtualMachine and the (Cluster)Instancetype and
// (Cluster)Preference objects it may name, as YAML or JSON documents on
// stdin (the VM first), and writes the VM as KubeVirt starts it, as JSON on
// stdout: its template is the VMI virt-controller creates, and
// spec.instancetype and spec.preference are gone, applied.
//
// The converter stage (pkg/launchprep) and the local controller
// (pkg/controller) exec it, through pkg/vmexpandexec, from beside their own
// binaries when a VM names an instancetype or a preference; it is a
// program of its own because kubevirt.io/kubevirt's pins do not fit the
// main module.
//
// Exit status: 0 expanded; 1 KubeVirt refuses the VM (a conflict with the
// instancetype, an unmet preference requirement, a missing object): one
// line on stderr says why; 2 unreadable input.
//
//	virt-launcher-expand < vm-and-objects.yaml
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/kubevirtmode/vmexpand"
)

// Exit codes (the converter stage reads them).
const (
	exitRefused    = 1
	exitBadInput   = 2
	programName    = "virt-launcher-expand"
	programSummary = "usage: virt-launcher-expand < VM-and-objects.yaml: expands a VirtualMachine's instancetype and preference with KubeVirt v1.6.0's code; the VM (JSON) goes to stdout"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, programSummary)
		if os.Args[1] == "--help" || os.Args[1] == "-h" {
			os.Exit(0)
		}
		os.Exit(exitBadInput)
	}
	vm, objs, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: reading stdin: %v\n", programName, err)
		os.Exit(exitBadInput)
	}
	o, err := vmexpand.NewObjects(objs...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", programName, err)
		os.Exit(exitBadInput)
	}
	expanded, err := vmexpand.VM(vm, vmexpand.ClusterConfig(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitRefused)
	}
	if err := write(os.Stdout, expanded); err != nil {
		fmt.Fprintf(os.Stderr, "%s: writing stdout: %v\n", programName, err)
		os.Exit(exitBadInput)
	}
}

// read takes the VirtualMachine (the first document) and the objects.
func read(r io.Reader) (*v1.VirtualMachine, []metav1.Object, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	yr := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var vm *v1.VirtualMachine
	var objs []metav1.Object
	for n := 1; ; n++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", n, err)
		}
		if strings.TrimSpace(string(doc)) == "" {
			continue
		}
		if vm == nil {
			vm = &v1.VirtualMachine{}
			if err := yaml.Unmarshal(doc, vm); err != nil {
				return nil, nil, fmt.Errorf("document %d: VirtualMachine: %w", n, err)
			}
			if vm.Kind != "VirtualMachine" {
				return nil, nil, fmt.Errorf("document %d: kind %q: want the VirtualMachine first", n, vm.Kind)
			}
			continue
		}
		obj, err := vmexpand.DecodeObject(doc)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", n, err)
		}
		objs = append(objs, obj)
	}
	if vm == nil {
		return nil, nil, errors.New("no VirtualMachine")
	}
	return vm, objs, nil
}

// write encodes the VM without its status (empty: the input's was not
// read), so that the launcher does not report one as ignored.
func write(w io.Writer, vm *v1.VirtualMachine) error {
	data, err := json.Marshal(vm)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return err
	}
	delete(obj, "status")
	return json.NewEncoder(w).Encode(obj)
}
