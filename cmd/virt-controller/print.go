package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// printSnapshots prints VMs as KubeVirt would show them: "json" and "yaml"
// give the VirtualMachine objects (one object when single, else a List),
// "table" a kubectl-like table with the crash-loop columns added.
func printSnapshots(w io.Writer, snaps []*controller.Snapshot, format string, single bool) error {
	switch format {
	case "json", "yaml":
		var obj any
		if single && len(snaps) == 1 {
			obj = vmObject(snaps[0])
		} else {
			items := make([]*v1.VirtualMachine, 0, len(snaps))
			for _, s := range snaps {
				items = append(items, vmObject(s))
			}
			obj = map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
		}
		data, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding status: %w", err)
		}
		if format == "yaml" {
			if data, err = yaml.JSONToYAML(data); err != nil {
				return fmt.Errorf("encoding status: %w", err)
			}
			_, err = w.Write(data)
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 2, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tAGE\tSTATUS\tREADY\tRUNSTRATEGY\tATTEMPT\tFAILS\tRETRY IN")
	now := time.Now()
	for _, s := range snaps {
		vm := s.VM
		strategy, _ := vm.RunStrategy()
		fails := 0
		if vm.Status.StartFailure != nil {
			fails = vm.Status.StartFailure.ConsecutiveFailCount
		}
		age := "-"
		if !vm.CreationTimestamp.IsZero() {
			age = now.Sub(vm.CreationTimestamp.Time).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%d\t%d\t%s\n", vm.Namespace, vm.Name, age,
			vm.Status.PrintableStatus, vm.Status.Ready, strategy, s.Attempt, fails, retryText(s, now))
	}
	return tw.Flush()
}

func vmObject(s *controller.Snapshot) *v1.VirtualMachine {
	vm := s.VM.DeepCopy()
	vm.APIVersion, vm.Kind = v1.GroupVersion.String(), "VirtualMachine"
	return vm
}
