package ctlharness

import (
	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestGuestImage is the image reference of the test guest (images/guest).
const TestGuestImage = "localhost/crashloop/test-guest:latest"

// DefaultKernelArgs are the test guest's kernel arguments when a suite
// gives none: a serial console and an immediate reboot (so, with the
// launcher, an end) on panic.
const DefaultKernelArgs = "console=ttyS0 quiet panic=-1"

// TestGuestVM is the VirtualMachine every suite runs: one vCPU, 256 MiB,
// the test guest booted from its kernel-boot container, and a scratch
// container disk on virtio, in namespace default. strategy "" leaves
// spec.runStrategy unset; kernelArgs "" means DefaultKernelArgs.
func TestGuestVM(name string, strategy v1.VirtualMachineRunStrategy, annotations map[string]string, kernelArgs string) *v1.VirtualMachine {
	if kernelArgs == "" {
		kernelArgs = DefaultKernelArgs
	}
	grace := int64(10)
	memory := resource.MustParse("256Mi")
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: v1.VirtualMachineInstanceSpec{
				TerminationGracePeriodSeconds: &grace,
				Domain: v1.DomainSpec{
					CPU:    &v1.CPU{Cores: 1},
					Memory: &v1.Memory{Guest: &memory},
					Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{
						KernelArgs: kernelArgs,
						Container:  &v1.KernelBootContainer{Image: TestGuestImage, KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"},
					}},
					Devices: v1.Devices{Disks: []v1.Disk{{Name: "scratch", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
				},
				Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: TestGuestImage}}}},
			},
		}},
	}
	if strategy != "" {
		vm.Spec.RunStrategy = &strategy
	}
	return vm
}

// Manifest renders a VirtualMachine as the YAML file a suite hands to
// virt-controller.
func Manifest(vm *v1.VirtualMachine) string {
	data, err := yaml.Marshal(vm)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return string(data)
}
