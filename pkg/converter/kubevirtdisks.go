package converter

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "kubevirt.io/api/core/v1"
)

// kernelBootDir is the sub-folder of a pod's container-disks folder where
// virt-handler bind-mounts the kernel-boot container's kernel and initrd
// (KubeVirt's containerdisk.KernelBootName).
const kernelBootDir = "kernel-boot"

// containerDiskTarget is where virt-handler bind-mounts the containerDisk
// of the volume named name, relative to the container-disks folder:
// disk_N.img, N the volume's index in spec.volumes (KubeVirt's
// containerdisk.GetDiskTargetName).
func containerDiskTarget(vmi *v1.VirtualMachineInstance, name string) string {
	for i, v := range vmi.Spec.Volumes {
		if v.Name == name {
			return fmt.Sprintf("disk_%d.img", i)
		}
	}
	return ""
}

// kubeVirtDiskFile is the file rel of opts.ContainerDiskDir, when there is
// one: the disk or kernel-boot file KubeVirt's virt-handler bind-mounted
// into the launcher pod, which is what KubeVirt's launcher reads.
//
// When there is none, the caller falls back to the image folder. That
// happens only where no virt-handler of KubeVirt's mounts anything: our
// own runners (the controller, the node agent) name no ContainerDiskDir,
// and in KubeVirt mode with cluster-lite's node agent as virt-handler
// (`clusterlite up --launcher-mode kubevirt`, virt-handler-driver) or in
// the kubevirtmode conformance suite, the pod's container-disks folder
// stays empty, since they run no volumecontainerdisk containers and make
// no bind mounts; their compute container gets the image folder instead.
// Under KubeVirt's own virt-handler the files are always there before the
// first SyncVirtualMachine (handleStartingVMI mounts them first), and
// cluster-lite's kubelet mode gives compute no image folder, so a missing
// mount there is an error naming the file, never a silent fallback.
func kubeVirtDiskFile(opts *DomainOptions, rel string) (string, bool) {
	if opts.ContainerDiskDir == "" || rel == "" {
		return "", false
	}
	p := filepath.Join(opts.ContainerDiskDir, rel)
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return "", false
	}
	return p, true
}

// kernelBootFile resolves a kernel-boot file (kernelPath or initrdPath) of
// image: virt-handler's bind mount of it when there is one, else the file
// in the image folder.
func kernelBootFile(opts *DomainOptions, image, inImage, field string) (string, error) {
	if p, ok := kubeVirtDiskFile(opts, filepath.Join(kernelBootDir, filepath.Base(inImage))); ok {
		return p, nil
	}
	if opts.Images == nil {
		return "", &SpecError{Field: "spec.domain.firmware.kernelBoot.container.image", Msg: "no image folder to resolve it (pass --image-dir)" + notMounted(opts, filepath.Join(kernelBootDir, filepath.Base(inImage)))}
	}
	p, err := opts.Images.File(image, inImage)
	if err != nil {
		return "", &SpecError{Field: field, Msg: err.Error()}
	}
	return p, nil
}

// notMounted says which file of the container-disks folder was missing,
// when there is such a folder.
func notMounted(opts *DomainOptions, rel string) string {
	if opts.ContainerDiskDir == "" {
		return ""
	}
	return fmt.Sprintf(", and virt-handler mounted no %s", filepath.Join(opts.ContainerDiskDir, rel))
}
