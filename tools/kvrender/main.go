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
// A VMI that names hook sidecars (hooks.kubevirt.io/hookSidecars) gets
// them as virt-launcher does: KubeVirt's own sidecar programs in
// --sidecar-bin, started as the launcher's direct mode starts them
// (kubevirtmode/hooksidecar, each in a mount namespace of its own, so
// kvrender needs root then), and the domain rewritten by KubeVirt's hook
// manager from the converter's domain (pkg/hooks, OnDefineDomain).
//
// Usage: kvrender [--objects DIR]... [--sidecar-bin DIR] FILE...
//
// Instancetypes, preferences and the ConfigMaps of hook sidecars are
// looked up in the same file and in the YAML files of the --objects folders.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/crashloop-harness/crashloop/kubevirtmode/hooksidecar"
)

func main() {
	hooksidecar.Init()
	var objectDirs []string
	flag.Func("objects", "folder of YAML files with (Cluster)Instancetype, (Cluster)Preference and ConfigMap objects (repeatable)", func(dir string) error {
		objectDirs = append(objectDirs, dir)
		return nil
	})
	sidecarBin := flag.String("sidecar-bin", "", "folder of KubeVirt's hook sidecar programs (sidecar-shim, smbios-onDefineDomain); empty refuses hook sidecars")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kvrender [--objects DIR]... [--sidecar-bin DIR] FILE...")
		os.Exit(2)
	}
	if err := run(objectDirs, *sidecarBin, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "kvrender:", err)
		os.Exit(1)
	}
}

func run(objectDirs []string, sidecarBin string, files []string) error {
	shared, err := readObjectDirs(objectDirs)
	if err != nil {
		return err
	}
	hooks, err := newHookEnv(sidecarBin)
	if err != nil {
		return err
	}
	defer hooks.close()
	out := json.NewEncoder(os.Stdout)
	for _, file := range files {
		docs, err := readFile(file)
		if err != nil {
			return err
		}
		objs := shared.with(docs)
		for _, d := range docs.machines {
			r := result{File: file, Index: d.index, Name: d.name}
			xml, err := render(d, objs, hooks)
			if err != nil {
				r.Error = err.Error()
			} else {
				r.Domain = xml
			}
			if err := out.Encode(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// result is one rendered document.
type result struct {
	File   string `json:"file"`
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Domain string `json:"domain,omitempty"`
	Error  string `json:"error,omitempty"`
}
