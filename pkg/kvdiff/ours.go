package kvdiff

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/admission"
	"github.com/crashloop-harness/crashloop/pkg/converter"
	"github.com/crashloop-harness/crashloop/pkg/hooksexec"
	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// Sandbox is the folder our side renders in: a fake image folder holding
// every image a manifest names, a claim folder with every claim, and the
// per-VMI scratch folder, so that rendering touches nothing else.
type Sandbox struct {
	Dir string
	// Expand is how our side expands the instancetypes and preferences a
	// VM names (virt-launcher-expand and the --instancetypes folder).
	Expand vmexpandexec.Expander
	// Hooks is virt-launcher-hooks, for a VMI that names hook sidecars;
	// HookObjects are folders whose ConfigMaps they may name, after the
	// file's own.
	Hooks       string
	HookObjects []string
}

// Ours renders one manifest the way the launcher's converter stage does
// (pkg/launchprep: vmexpandexec.Expander, manifest.Read, converter.CheckSupported,
// kvdefaults.Apply, admission.Admit with every feature gate on, as the
// cluster's own admission would have let the manifest through,
// converter.Convert) under TCG, inside the sandbox. An error is the
// launcher's refusal.
func (s Sandbox) Ours(ctx context.Context, data []byte, input string) (string, error) {
	machine, err := s.Expand.Machine(ctx, data, input)
	if err != nil {
		return "", err
	}
	vmi, doc, err := manifest.Read(machine, input)
	if err != nil {
		return "", err
	}
	if err := converter.CheckSupported(doc.Raw); err != nil {
		return "", err
	}
	kvdefaults.Apply(vmi)
	if err := admission.Admit(admission.Input{VMI: vmi, DataVolumeTemplates: doc.DataVolumeTemplates, FeatureGates: launcherapi.FeatureGateNames()}); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(s.Dir, "vmi-")
	if err != nil {
		return "", err
	}
	images, err := s.images(dir, vmi, doc.DataVolumeTemplates)
	if err != nil {
		return "", err
	}
	claims := filepath.Join(dir, "claims")
	for _, v := range vmi.Spec.Volumes {
		name := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		case v.DataVolume != nil && !hasTemplate(doc.DataVolumeTemplates, v.DataVolume.Name):
			name = v.DataVolume.Name
		case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
			name = v.Ephemeral.PersistentVolumeClaim.ClaimName
		case v.HostDisk != nil:
			// Host paths are moved into the sandbox (a path substitution).
			v.HostDisk.Path = filepath.Join(dir, "host", v.HostDisk.Path)
			if err := os.MkdirAll(filepath.Dir(v.HostDisk.Path), 0o755); err != nil {
				return "", err
			}
		}
		if name != "" {
			if err := writeFile(filepath.Join(claims, name, "disk.img"), "raw"); err != nil {
				return "", err
			}
		}
	}
	scratch := filepath.Join(dir, "scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return "", err
	}
	conv, err := converter.Convert(ctx, vmi, converter.DomainOptions{
		Accel: converter.AccelTCG, Images: images, ConsoleLog: filepath.Join(dir, "console.log"),
		ScratchDir: scratch, ClaimDir: claims, DataVolumeTemplates: doc.DataVolumeTemplates,
		OVMF:     fakeOVMF(dir),
		HostPort: func(string, int) (int, error) { return 0, nil },
	})
	if err != nil {
		return "", err
	}
	xml, err := conv.Domain.Marshal()
	if err != nil || !hooksexec.Named(vmi) {
		return xml, err
	}
	return s.hooks(ctx, vmi, xml, data, input, dir)
}

// hooks applies the VMI's hook sidecars as the converter stage does
// (hooksexec.Runner in direct mode), with the ConfigMaps of the file and
// of HookObjects.
func (s Sandbox) hooks(ctx context.Context, vmi *v1.VirtualMachineInstance, xml string, data []byte, input, dir string) (string, error) {
	l, err := manifest.Split(data, input)
	if err != nil {
		return "", err
	}
	objs := l.Objects
	for _, d := range s.HookObjects {
		more, err := manifest.ReadObjectDir(d)
		if err != nil {
			return "", err
		}
		objs = append(objs, more...)
	}
	r := hooksexec.Runner{Exe: s.Hooks, WorkDir: filepath.Join(dir, "hooks")}
	if err := os.MkdirAll(r.WorkDir, 0o755); err != nil {
		return "", err
	}
	return r.Apply(ctx, vmi, xml, objs, input)
}

func hasTemplate(dvts []v1.DataVolumeTemplateSpec, name string) bool {
	for _, d := range dvts {
		if d.Name == name {
			return true
		}
	}
	return false
}

// images makes an image folder that holds every image the VMI names, each
// with a disk under /disk and the kernel-boot files it names.
func (s Sandbox) images(dir string, vmi *v1.VirtualMachineInstance, dvts []v1.DataVolumeTemplateSpec) (*converter.ImageStore, error) {
	root := filepath.Join(dir, "images")
	index := map[string]string{}
	add := func(ref string, files ...string) error {
		rel := fmt.Sprintf("img%d", len(index))
		if old, ok := index[ref]; ok {
			rel = old
		}
		index[ref] = rel
		for _, f := range files {
			if f == "" {
				continue
			}
			p := filepath.Join(root, rel, f)
			if err := writeFile(p, "x"); err != nil {
				return err
			}
			if strings.HasSuffix(f, ".qcow2") {
				// A real qcow2, as KubeVirt's containerDisk images are.
				if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "1M").CombinedOutput(); err != nil {
					return fmt.Errorf("qemu-img: %v: %s", err, out)
				}
			}
		}
		return nil
	}
	for _, d := range dvts {
		if r := d.Spec.Source; r != nil && r.Registry != nil && r.Registry.URL != nil {
			if err := add(strings.TrimPrefix(*r.Registry.URL, "docker://"), "/disk/disk.qcow2"); err != nil {
				return nil, err
			}
		}
	}
	for _, v := range vmi.Spec.Volumes {
		if cd := v.ContainerDisk; cd != nil {
			p := cd.Path
			if p == "" {
				p = "/disk/disk.qcow2"
			}
			if err := add(cd.Image, p); err != nil {
				return nil, err
			}
		}
	}
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		c := fw.KernelBoot.Container
		if err := add(c.Image, c.KernelPath, c.InitrdPath); err != nil {
			return nil, err
		}
	}
	data, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(root, converter.ImageIndexFile), string(data)); err != nil {
		return nil, err
	}
	return converter.OpenImageStore(root)
}

func fakeOVMF(dir string) converter.OVMF {
	d := filepath.Join(dir, "ovmf")
	o := converter.OVMF{Code: d + "/OVMF_CODE_4M.fd", Vars: d + "/OVMF_VARS_4M.fd", SecureCode: d + "/OVMF_CODE_4M.secboot.fd", SecureVars: d + "/OVMF_VARS_4M.ms.fd"}
	for _, f := range []string{o.Code, o.Vars, o.SecureCode, o.SecureVars} {
		_ = writeFile(f, filepath.Base(f))
	}
	return o
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strings.TrimSpace(content)), 0o644)
}
