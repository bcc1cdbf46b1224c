// Package hooksidecar runs KubeVirt v1.6.0's hook sidecars
// (hooks.kubevirt.io/hookSidecars) on one machine, with KubeVirt's own
// code: the annotation is read with pkg/hooks' UnmarshalHookSidecarList,
// the sidecars are KubeVirt's own programs built from the module
// (cmd/sidecars' sidecar-shim, cmd/sidecars/smbios as the
// example-hook-sidecar's onDefineDomain), and the domain is rewritten by
// pkg/hooks' manager (Collect, OnDefineDomain, Shutdown), as virt-launcher
// does after its converter.
//
// A pod gives each sidecar container the emptyDir hook-sidecar-sockets,
// sub-folder hook-sidecar-N, at /var/run/kubevirt-hooks, and the compute
// container the whole emptyDir there (virt-controller's template.go). Here
// each sidecar is a process in a mount namespace of its own where
// /var/run/kubevirt-hooks is its sub-folder of a sockets folder, and the
// process that collects them (Isolate) sees the whole sockets folder
// there: the paths KubeVirt's code has built in stay true without a pod.
//
// It is used by virt-launcher-hooks (the launcher's converter stage execs
// it) and by tools/kvrender (the differential's reference side), so that
// both sides run the same sidecars.
package hooksidecar

import (
	"fmt"
	"path"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/hooks"
)

// Annotation is the VMI annotation that names hook sidecars.
const Annotation = hooks.HookSidecarListAnnotationName

// The programs a known sidecar image runs, installed beside
// virt-launcher-hooks by `make kubevirtmode`.
const (
	// ShimExe is KubeVirt's cmd/sidecars (sidecar-shim): it serves the hook
	// protocol and runs onDefineDomain or preCloudInitIso from $PATH.
	ShimExe = "sidecar-shim"
	// SMBIOSExe is KubeVirt's cmd/sidecars/smbios, the example-hook-sidecar
	// image's /usr/bin/onDefineDomain.
	SMBIOSExe = "smbios-onDefineDomain"
)

// The hook programs the shim looks for in $PATH.
const (
	onDefineDomainBin  = "onDefineDomain"
	preCloudInitIsoBin = "preCloudInitIso"
)

// image is one sidecar image this package runs: its repository (the
// reference's path after the registry, without tag or digest) and the
// programs its container holds.
type image struct {
	repo string
	// bins are programs put on the sidecar's $PATH, by the name the
	// image installs them under, mapped to the program built here.
	bins map[string]string
}

// images are KubeVirt's own sidecar images: sidecar-shim-image (also what
// virt-controller runs for a configMap sidecar without an image) and
// example-hook-sidecar-image (the shim with the SMBIOS hook), whatever
// registry and tag name them.
var images = []image{
	{repo: "kubevirt/sidecar-shim"},
	{repo: "kubevirt/example-hook-sidecar", bins: map[string]string{onDefineDomainBin: SMBIOSExe}},
}

// Spec is one sidecar ready to start.
type Spec struct {
	// Index is its place in the annotation; Name is its container's name
	// (hook-sidecar-N) and the sub-folder of the sockets folder it serves in.
	Index int
	Name  string
	// Image is as the annotation names it ("" for the shim's default).
	Image string
	// Exe is the image's entrypoint, the built sidecar-shim.
	Exe string
	// Args are the container's arguments (the annotation's args).
	Args []string
	// Bins are the programs on its $PATH: name → file (built programs and
	// ConfigMap scripts).
	Bins map[string]string
	// Scripts are ConfigMap contents the sidecar sees as programs: name on
	// $PATH → script text.
	Scripts map[string]string
}

// ConfigMaps are the ConfigMaps a launch may name: name → key → value, in
// the VMI's namespace.
type ConfigMaps map[string]map[string]string

// Resolve reads the VMI's hook sidecar annotation into specs. binDir holds
// the programs the images run. An image it does not know, a field it does
// not run (command, pvc) or a missing ConfigMap or key is an error naming
// the annotation, the sidecar and the field.
func Resolve(vmi *v1.VirtualMachineInstance, binDir string, cms ConfigMaps) ([]Spec, error) {
	list, err := hooks.UnmarshalHookSidecarList(vmi)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %v: want a JSON list of sidecars such as [{\"image\": \"...\", \"args\": [\"--version\", \"v1alpha2\"]}]", Annotation, err)
	}
	var specs []Spec
	for i, sc := range list {
		s, err := resolveOne(i, sc, binDir, cms)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: sidecar %d: %w", Annotation, i, err)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func resolveOne(i int, sc hooks.HookSidecar, binDir string, cms ConfigMaps) (Spec, error) {
	s := Spec{Index: i, Name: fmt.Sprintf("hook-sidecar-%d", i), Image: sc.Image, Exe: path.Join(binDir, ShimExe), Args: sc.Args, Bins: map[string]string{}, Scripts: map[string]string{}}
	switch {
	case len(sc.Command) != 0:
		return s, fmt.Errorf("field command: not run here: the image's own entrypoint (sidecar-shim) runs, remove command")
	case sc.PVC != nil:
		return s, fmt.Errorf("field pvc: not run here: a claim shared with a sidecar needs a cluster's volumes, remove pvc")
	case sc.Image == "" && sc.ConfigMap == nil:
		return s, fmt.Errorf("field image: must be set for a sidecar without configMap")
	}
	img, ok := lookup(sc.Image)
	if !ok {
		return s, fmt.Errorf("field image: %q is not an image this launcher runs: it runs KubeVirt's own %s (any registry and tag), built from kubevirt.io/kubevirt v1.6.0", sc.Image, knownRepos())
	}
	for name, exe := range img.bins {
		s.Bins[name] = path.Join(binDir, exe)
	}
	if cm := sc.ConfigMap; cm != nil {
		base := path.Base(cm.HookPath)
		if base != onDefineDomainBin && base != preCloudInitIsoBin {
			return s, fmt.Errorf("field configMap.hookPath: %q: sidecar-shim runs only %s or %s from $PATH, such as /usr/bin/%s", cm.HookPath, onDefineDomainBin, preCloudInitIsoBin, onDefineDomainBin)
		}
		data, ok := cms[cm.Name]
		if !ok {
			return s, fmt.Errorf("field configMap.name: ConfigMap %q not found: put it beside the VM in the manifest file, or in the --instancetypes folder", cm.Name)
		}
		script, ok := data[cm.Key]
		if !ok {
			return s, fmt.Errorf("field configMap.key: ConfigMap %q has no key %q", cm.Name, cm.Key)
		}
		delete(s.Bins, base)
		s.Scripts[base] = script
	}
	return s, nil
}

// lookup finds a known image by its repository, whatever the registry and
// tag; "" is the shim, as virt-controller's SIDECAR_SHIM_IMAGE.
func lookup(ref string) (image, bool) {
	if ref == "" {
		return images[0], true
	}
	repo := ref
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	for _, img := range images {
		if repo == img.repo || strings.HasSuffix(repo, "/"+img.repo) {
			return img, true
		}
	}
	return image{}, false
}

func knownRepos() string {
	var names []string
	for _, img := range images {
		names = append(names, img.repo)
	}
	return strings.Join(names, " and ")
}
