// Command kvrender renders VM and VMI manifests into libvirt domain XML with
// KubeVirt v1.6.0's own code, linked from kubevirt.io/kubevirt: what
// virt-api and virt-controller do to a VM before its VMI exists, VM
// defaults and instancetype/preference application in their order
// (kubevirtmode/vmexpand, which the launcher's virt-launcher-expand runs
// too), the VMI defaults virt-api's mutating webhook
// applies (defaults.SetDefaultVirtualMachineInstance), the options
// virt-handler sends (the cluster's SMBIOS, balloon stats period, EFI
// display), a converter context built the way virt-launcher's
// generateConverterContext builds one, the converter itself
// (converter.Convert_v1_VirtualMachineInstance_To_api_Domain) and
// virt-launcher's domain defaults (api.NewDefaulter).
//
// It is the reference side of the differential in pkg/kvdiff: one JSON line
// per VM or VMI document, {"file","index","name","domain"} or
// {"file","index","name","error"}.
//
// Usage: kvrender [--objects DIR] FILE...
//
// Instancetypes and preferences are looked up in the same file and in the
// YAML files of --objects.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	objects := flag.String("objects", "", "folder of YAML files with (Cluster)Instancetype and (Cluster)Preference objects")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kvrender [--objects DIR] FILE...")
		os.Exit(2)
	}
	shared, err := readObjectDir(*objects)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvrender:", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	for _, file := range flag.Args() {
		docs, err := readFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvrender:", err)
			os.Exit(1)
		}
		objs := shared.with(docs.objects)
		for _, d := range docs.machines {
			r := result{File: file, Index: d.index, Name: d.name}
			xml, err := render(d, objs)
			if err != nil {
				r.Error = err.Error()
			} else {
				r.Domain = xml
			}
			if err := out.Encode(r); err != nil {
				fmt.Fprintln(os.Stderr, "kvrender:", err)
				os.Exit(1)
			}
		}
	}
}

// result is one rendered document.
type result struct {
	File   string `json:"file"`
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Domain string `json:"domain,omitempty"`
	Error  string `json:"error,omitempty"`
}
