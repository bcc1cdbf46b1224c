// Package testguest is the test guest (images/guest) as the suites and
// benchmarks run it: its image reference, its kernel arguments, and the
// VirtualMachine and VirtualMachineInstance every suite boots, so that
// each of these is spelled once.
package testguest

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Image is the image reference of the test guest (images/guest): its
// kernel-boot container and its containerDisk.
const Image = "localhost/crashloop/test-guest:latest"

// Kernel and Initrd are the paths of the guest's kernel and initramfs in
// Image.
const (
	Kernel = "/boot/vmlinuz"
	Initrd = "/boot/initrd.img"
)

// KernelArgs are the test guest's kernel arguments when a suite gives
// none: a serial console and an immediate reboot (so, with the launcher,
// an end) on panic. The guest's own directives (harness.poweroff=N, ...)
// go after them.
const KernelArgs = "console=ttyS0 quiet panic=-1"

// Disk is the name of the guest's scratch containerDisk (virtio, vda).
const Disk = "scratch"

// Spec says how one VMI of the test guest differs from the default.
type Spec struct {
	// Name and Namespace name the VMI; Namespace "" is default.
	Name, Namespace string
	// UID is the VMI's UID; "" leaves it unset.
	UID types.UID
	// Annotations are the VMI's annotations (faults, fail-fast).
	Annotations map[string]string
	// KernelArgs are the kernel arguments; "" means KernelArgs.
	KernelArgs string
	// GraceSeconds is terminationGracePeriodSeconds; 0 means 10.
	GraceSeconds int64
}

// VMISpec is the test guest's VMI spec: one vCPU, 256 MiB, booted from its
// kernel-boot container, with the scratch containerDisk on virtio.
func VMISpec(kernelArgs string, graceSeconds int64) v1.VirtualMachineInstanceSpec {
	if kernelArgs == "" {
		kernelArgs = KernelArgs
	}
	if graceSeconds == 0 {
		graceSeconds = 10
	}
	memory := resource.MustParse("256Mi")
	return v1.VirtualMachineInstanceSpec{
		TerminationGracePeriodSeconds: &graceSeconds,
		Domain: v1.DomainSpec{
			CPU:    &v1.CPU{Cores: 1},
			Memory: &v1.Memory{Guest: &memory},
			Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{
				KernelArgs: kernelArgs,
				Container:  &v1.KernelBootContainer{Image: Image, KernelPath: Kernel, InitrdPath: Initrd},
			}},
			Devices: v1.Devices{Disks: []v1.Disk{{Name: Disk, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
		},
		Volumes: []v1.Volume{{Name: Disk, VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: Image}}}},
	}
}

// VMI is one VirtualMachineInstance of the test guest.
func VMI(s Spec) *v1.VirtualMachineInstance {
	if s.Namespace == "" {
		s.Namespace = metav1.NamespaceDefault
	}
	return &v1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, Annotations: s.Annotations},
		Spec:       VMISpec(s.KernelArgs, s.GraceSeconds),
	}
}

// VM is the VirtualMachine every controller suite runs: the test guest's
// VMI spec as its template, in namespace default. strategy "" leaves
// spec.runStrategy unset; kernelArgs "" means KernelArgs.
func VM(name string, strategy v1.VirtualMachineRunStrategy, annotations map[string]string, kernelArgs string) *v1.VirtualMachine {
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec:       VMISpec(kernelArgs, 0),
		}},
	}
	if strategy != "" {
		vm.Spec.RunStrategy = &strategy
	}
	return vm
}

// Manifest renders a VirtualMachine or VirtualMachineInstance as the YAML
// file a suite hands to virt-controller or virt-launcher.
func Manifest(obj any) (string, error) {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("rendering the test guest's manifest: %w", err)
	}
	return string(data), nil
}
