package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/defaults"
	ephemeraldisk "kubevirt.io/kubevirt/pkg/ephemeral-disk"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	"kubevirt.io/kubevirt/pkg/network/domainspec"
	"kubevirt.io/kubevirt/pkg/os/disk"
	kutil "kubevirt.io/kubevirt/pkg/util"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/arch"

	"github.com/crashloop-harness/crashloop/kubevirtmode/hooksidecar"
	"github.com/crashloop-harness/crashloop/kubevirtmode/vmexpand"
)

// The folders virt-launcher's flags default to (cmd/virt-launcher).
const (
	ephemeralDiskDir = "/var/run/kubevirt-ephemeral-disks"
	ovmfDir          = "/usr/share/OVMF"
	// vmiUID stands in for the UID the API server gives a VMI.
	vmiUID = "4a6fe1b2-9a53-4a59-bb69-0b6d3c0c3a11"
)

// render turns one VM or VMI into domain XML as a KubeVirt v1.6.0 cluster
// with a default KubeVirt CR on an amd64 node would.
func render(m machine, objs *objects, hooks *hookEnv) (string, error) {
	cfg := vmexpand.ClusterConfig()
	vmi := m.vmi
	if m.vm != nil {
		var err error
		if vmi, err = vmiFromVM(m.vm, cfg, objs); err != nil {
			return "", err
		}
	}
	vmi = vmi.DeepCopy()
	if vmi.Namespace == "" {
		vmi.Namespace = vmexpand.DefaultNamespace
	}
	vmi.UID = types.UID(vmiUID)
	// virt-api's VMI mutator (pkg/virt-api/webhooks/mutating-webhook/mutators).
	if err := defaults.SetDefaultVirtualMachineInstance(cfg, vmi); err != nil {
		return "", fmt.Errorf("KubeVirt's VMI defaults: %w", err)
	}
	c, err := converterContext(vmi, cfg)
	if err != nil {
		return "", err
	}
	domain := &api.Domain{}
	if err := converter.Convert_v1_VirtualMachineInstance_To_api_Domain(vmi, domain, c); err != nil {
		return "", fmt.Errorf("KubeVirt's converter: %w", err)
	}
	api.NewDefaulter(c.Architecture.GetArchitecture()).SetObjectDefaults_Domain(domain)
	if _, ok := vmi.Annotations[hooksidecar.Annotation]; ok {
		return hooks.withHooks(vmi, &domain.Spec, objs)
	}
	out, err := xml.MarshalIndent(domain.Spec, "", "  ")
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// hookEnv is where kvrender runs hook sidecars: KubeVirt's programs in
// bin, and the folder it sees as /var/run/kubevirt-hooks (in a mount
// namespace of its own, hooksidecar.Isolate).
type hookEnv struct {
	bin, work string
}

// newHookEnv re-executes kvrender in a mount namespace of its own when bin
// is set; a zero hookEnv refuses hook sidecars.
func newHookEnv(bin string) (*hookEnv, error) {
	if bin == "" {
		return &hookEnv{}, nil
	}
	hooksidecar.Isolate()
	work, err := os.MkdirTemp("", "kvrender-hooks-")
	if err != nil {
		return nil, err
	}
	h := &hookEnv{bin: bin, work: work}
	if err := os.Mkdir(h.sockets(), 0o755); err != nil {
		h.close()
		return nil, err
	}
	if err := hooksidecar.UseSocketsDir(h.sockets()); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *hookEnv) sockets() string { return filepath.Join(h.work, "sockets") }

func (h *hookEnv) close() {
	if h.work != "" {
		_ = os.RemoveAll(h.work) // a temporary folder
	}
}

// withHooks is virt-launcher's define with hooks
// (util.SetDomainSpecStrWithHooks): the VMI's hook sidecars started,
// KubeVirt's hook manager's OnDefineDomain over the converter's domain, the
// XML it returns being what libvirt gets.
func (h *hookEnv) withHooks(vmi *v1.VirtualMachineInstance, spec *api.DomainSpec, objs *objects) (string, error) {
	if h.bin == "" {
		return "", fmt.Errorf("the VMI names hook sidecars: kvrender runs them only with --sidecar-bin")
	}
	cms := hooksidecar.ConfigMaps{}
	for _, cm := range objs.configMaps {
		ns := cm.Namespace
		if ns == "" {
			ns = vmexpand.DefaultNamespace
		}
		if _, seen := cms[cm.Name]; !seen && ns == vmi.Namespace {
			cms[cm.Name] = cm.Data
		}
	}
	specs, err := hooksidecar.Resolve(vmi, h.bin, cms)
	if err != nil {
		return "", err
	}
	// Each VMI's sidecars get the sockets folder empty, as a new pod's.
	entries, err := os.ReadDir(h.sockets())
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(h.sockets(), e.Name())); err != nil {
			return "", err
		}
	}
	scratch, err := os.MkdirTemp(h.work, "vmi-")
	if err != nil {
		return "", err
	}
	running, err := hooksidecar.Start(specs, h.sockets(), scratch)
	if err != nil {
		return "", err
	}
	defer running.Stop()
	if err := running.Ready(hookTimeout); err != nil {
		return "", err
	}
	return hooksidecar.OnDefineDomain(hooksidecar.Wait{N: uint(len(specs)), Timeout: hookTimeout, Exited: running.Exited, Shutdown: true}, spec, vmi)
}

// hookTimeout stands in for virt-launcher's --qemu-timeout, which bounds
// its wait for the sidecars' sockets.
const hookTimeout = time.Minute

// vmiFromVM is what virt-api and virt-controller do to a VM before its
// VMI exists (vmexpand.VM, in KubeVirt's order), and the VMI made from the
// expanded template (setupVMIFromVM).
func vmiFromVM(vm *v1.VirtualMachine, cfg *virtconfig.ClusterConfig, objs *objects) (*v1.VirtualMachineInstance, error) {
	o, err := vmexpand.NewObjects(objs.list...)
	if err != nil {
		return nil, err
	}
	expanded, err := vmexpand.VM(vm, cfg, o)
	var missing *vmexpand.MissingError
	if errors.As(err, &missing) {
		return nil, fmt.Errorf("%s %q is not in the file nor in --objects", missing.Kind, missing.Name)
	}
	var refused *vmexpand.RefusedError
	if errors.As(err, &refused) {
		return nil, fmt.Errorf("virt-api refuses the VM: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("KubeVirt's instancetype expansion: %w", err)
	}
	vmi := v1.NewVMIReferenceFromNameWithNS(expanded.Namespace, expanded.Name)
	vmi.ObjectMeta = *expanded.Spec.Template.ObjectMeta.DeepCopy()
	vmi.Name, vmi.Namespace = expanded.Name, expanded.Namespace
	vmi.Spec = *expanded.Spec.Template.Spec.DeepCopy()
	return vmi, nil
}

// converterContext is virt-launcher's generateConverterContext
// (pkg/virt-launcher/virtwrap/manager.go) with the options virt-handler
// sends (pkg/virt-handler/options.go) for a default cluster: no block
// volumes, no hotplug, no host CPU topology, containerDisks in qcow2, and
// no host devices (SR-IOV, GPUs, USB: another node's hardware, whose
// device plugins hand them over; leaving them out keeps kvrender free of
// libvirt's cgo bindings, which those packages link).
func converterContext(vmi *v1.VirtualMachineInstance, cfg *virtconfig.ClusterConfig) (*converter.ConverterContext, error) {
	c := &converter.ConverterContext{
		Architecture:          arch.NewConverter("amd64"),
		VirtualMachine:        vmi,
		AllowEmulation:        true,
		IsBlockPVC:            map[string]bool{},
		IsBlockDV:             map[string]bool{},
		HotplugVolumes:        map[string]v1.VolumeStatus{},
		PermanentVolumes:      map[string]v1.VolumeStatus{},
		DisksInfo:             map[string]*disk.DiskInfo{},
		UseVirtioTransitional: vmi.Spec.Domain.Devices.UseVirtioTransitional != nil && *vmi.Spec.Domain.Devices.UseVirtioTransitional,
		EphemeraldiskCreator:  ephemeraldisk.NewEphemeralDiskCreator(filepath.Join(ephemeralDiskDir, "disk-data")),
		UseLaunchSecurity:     kutil.UseLaunchSecurity(vmi),
		Topology:              &cmdv1.Topology{},
		MemBalloonStatsPeriod: uint(cfg.GetMemBalloonStatsPeriod()),
		ExpandDisksEnabled:    cfg.ExpandDisksEnabled(),
		FreePageReporting:     freePageReporting(cfg, vmi),
		BochsForEFIGuests:     !cfg.VGADisplayForEFIGuestsEnabled(),
		SerialConsoleLog:      serialConsoleLog(cfg, vmi),
		DomainAttachmentByInterfaceName: domainspec.DomainAttachmentByInterfaceName(
			vmi.Spec.Domain.Devices.Interfaces, cfg.GetNetworkBindings()),
	}
	if s := cfg.GetSMBIOS(); s != nil {
		c.SMBios = &cmdv1.SMBios{Family: s.Family, Product: s.Product, Manufacturer: s.Manufacturer, Sku: s.Sku, Version: s.Version}
	}
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			c.DisksInfo[v.Name] = &disk.DiskInfo{Format: "qcow2"}
		}
	}
	if vmi.IsBootloaderEFI() {
		secureBoot := vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot == nil || *vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot
		code, vars := "OVMF_CODE.fd", "OVMF_VARS.fd"
		if secureBoot {
			code, vars = "OVMF_CODE.secboot.fd", "OVMF_VARS.secboot.fd"
		}
		c.EFIConfiguration = &converter.EFIConfiguration{
			EFICode: filepath.Join(ovmfDir, code), EFIVars: filepath.Join(ovmfDir, vars), SecureLoader: secureBoot,
		}
	}
	return c, nil
}

// freePageReporting is virt-launcher's isFreePageReportingEnabled.
func freePageReporting(cfg *virtconfig.ClusterConfig, vmi *v1.VirtualMachineInstance) bool {
	b := vmi.Spec.Domain.Devices.AutoattachMemBalloon
	return !cfg.IsFreePageReportingDisabled() && (b == nil || *b) && !vmi.IsHighPerformanceVMI() &&
		vmi.GetAnnotations()[v1.FreePageReportingDisabledAnnotation] != "true"
}

// serialConsoleLog is virt-launcher's isSerialConsoleLogEnabled.
func serialConsoleLog(cfg *virtconfig.ClusterConfig, vmi *v1.VirtualMachineInstance) bool {
	l := vmi.Spec.Domain.Devices.LogSerialConsole
	return (l != nil && *l) || (l == nil && !cfg.IsSerialConsoleLogDisabled())
}
