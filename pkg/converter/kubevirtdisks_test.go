package converter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// kubeVirtPodDisks lays out a pod's container-disks folder as KubeVirt's
// virt-handler leaves it: containerDisk volume 1 as disk_1.img and the
// kernel-boot files under kernel-boot/.
func kubeVirtPodDisks(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"disk_1.img", "kernel-boot/vmlinuz", "kernel-boot/initrd.img"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// twoDiskVMI has a hostDisk at volume index 0 and the containerDisk at
// index 1, so that a reader of disk_0.img would pick the wrong file.
func twoDiskVMI(t *testing.T) *v1.VirtualMachineInstance {
	host := filepath.Join(t.TempDir(), "host.img")
	if err := os.WriteFile(host, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "data"}, {Name: "root"}}
	vmi.Spec.Volumes = []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: host, Type: v1.HostDiskExists}}},
		{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}},
	}
	return vmi
}

func TestKubeVirtContainerDisksFromVirtHandlersMounts(t *testing.T) {
	images, root := testImages(t)
	pod := kubeVirtPodDisks(t)
	got, err := BuildDomain(twoDiskVMI(t), DomainOptions{Accel: AccelTCG, Images: images, ContainerDiskDir: pod, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatalf("BuildDomain: %v", err)
	}
	if want := filepath.Join(pod, "kernel-boot", "vmlinuz"); got.OS.Kernel != want {
		t.Errorf("kernel %s, want virt-handler's mount %s", got.OS.Kernel, want)
	}
	if want := filepath.Join(pod, "kernel-boot", "initrd.img"); got.OS.Initrd != want {
		t.Errorf("initrd %s, want virt-handler's mount %s", got.OS.Initrd, want)
	}
	d := got.Devices.Disks[1]
	if d.BackingStore == nil || d.BackingStore.Source.File.File != filepath.Join(pod, "disk_1.img") {
		t.Fatalf("containerDisk at volume index 1: want an overlay backed by %s, got %+v", filepath.Join(pod, "disk_1.img"), d.BackingStore)
	}
	for _, p := range []string{got.OS.Kernel, got.OS.Initrd, d.BackingStore.Source.File.File} {
		if strings.HasPrefix(p, root) {
			t.Errorf("%s is the image folder's, with virt-handler's mounts present", p)
		}
	}
}

func TestKubeVirtContainerDisksFallBackToTheImageFolder(t *testing.T) {
	images, root := testImages(t)
	// An empty container-disks folder: no virt-handler of KubeVirt's
	// mounted anything (the node agent or the conformance suite plays it).
	got, err := BuildDomain(twoDiskVMI(t), DomainOptions{Accel: AccelTCG, Images: images, ContainerDiskDir: t.TempDir(), ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatalf("BuildDomain: %v", err)
	}
	if got.OS.Kernel != filepath.Join(root, "boot", "vmlinuz") || got.OS.Initrd != filepath.Join(root, "boot", "initrd.img") {
		t.Errorf("kernel %s, initrd %s: want the image folder's", got.OS.Kernel, got.OS.Initrd)
	}
	if d := got.Devices.Disks[1]; d.BackingStore == nil || d.BackingStore.Source.File.File != filepath.Join(root, "disk", "disk.img") {
		t.Errorf("containerDisk: want the image folder's disk, got %+v", d.BackingStore)
	}
}

func TestKubeVirtContainerDisksWithoutMountOrImageFolder(t *testing.T) {
	pod := t.TempDir()
	vmi := twoDiskVMI(t)
	vmi.Spec.Domain.Firmware.KernelBoot.Container = nil
	vmi.Spec.Domain.Firmware.KernelBoot.KernelArgs = ""
	_, err := BuildDomain(vmi, DomainOptions{Accel: AccelTCG, ContainerDiskDir: pod})
	var se *SpecError
	if !errors.As(err, &se) || se.Field != "spec.volumes[1].containerDisk.image" || !strings.Contains(se.Msg, "virt-handler mounted no "+filepath.Join(pod, "disk_1.img")) {
		t.Fatalf("want a SpecError on spec.volumes[1].containerDisk.image naming the missing %s, got %v", filepath.Join(pod, "disk_1.img"), err)
	}
	_, err = BuildDomain(baseVMI(), DomainOptions{Accel: AccelTCG, ContainerDiskDir: pod})
	if !errors.As(err, &se) || !strings.Contains(se.Msg, "virt-handler mounted no "+filepath.Join(pod, "kernel-boot", "vmlinuz")) {
		t.Fatalf("want a SpecError naming the missing kernel-boot/vmlinuz, got %v", err)
	}
}
