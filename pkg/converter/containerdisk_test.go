package converter

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/containerdisk"
	cdt "github.com/crashloop-harness/crashloop/pkg/containerdisk/containerdisktest"
)

// TestContainerDiskFromOCI: images.json values that are transport
// references resolve through pkg/containerdisk, and the domain's disk is a
// per-VMI overlay backed by the cached extraction.
func TestContainerDiskFromOCI(t *testing.T) {
	dir := t.TempDir()
	qcow := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", qcow, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	disk, err := os.ReadFile(qcow)
	if err != nil {
		t.Fatal(err)
	}
	img := cdt.Image{Gzip: true, Layers: [][]byte{cdt.Layer(t,
		cdt.File("boot/vmlinuz", []byte("kernel")), cdt.File("boot/initrd.img", []byte("initrd")), cdt.File("disk/disk.qcow2", disk))}}
	img.OCIArchive(t, filepath.Join(dir, "guest.oci.tar"))
	img.OCILayout(t, filepath.Join(dir, "layout"), "v1")
	index := map[string]string{
		"example.com/archive:1": "oci-archive:guest.oci.tar",
		"example.com/layout:1":  "oci:layout:v1",
	}
	b, _ := json.Marshal(index)
	os.WriteFile(filepath.Join(dir, ImageIndexFile), b, 0o644)
	images, err := OpenImageStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	images.UseContainerDisks(containerdisk.Options{CacheDir: cache, StorageRoot: filepath.Join(t.TempDir(), "absent")})

	for ref := range index {
		vmi := baseVMI()
		vmi.Spec.Domain.Firmware.KernelBoot.Container.Image = ref
		vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
		vmi.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: ref}}}}
		scratch := t.TempDir()
		dom, err := BuildDomain(vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: scratch})
		if err != nil {
			t.Fatalf("%s: BuildDomain: %v", ref, err)
		}
		d := dom.Devices.Disks[0]
		if d.Driver.Type != "qcow2" || filepath.Dir(d.Source.File.File) != scratch {
			t.Fatalf("%s: want a qcow2 overlay in the scratch folder, got %+v %+v", ref, d.Driver, d.Source.File)
		}
		out, err := exec.Command("qemu-img", "info", "--output", "json", d.Source.File.File).Output()
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Backing string `json:"backing-filename"`
		}
		json.Unmarshal(out, &info)
		if !strings.HasPrefix(info.Backing, cache+"/") || cdt.SHA256File(t, info.Backing) != cdt.SHA256(disk) {
			t.Fatalf("%s: overlay backed by %q, want the extracted disk in %s", ref, info.Backing, cache)
		}
		if k := dom.OS.Kernel; !strings.HasPrefix(k, cache+"/") {
			t.Fatalf("%s: kernel %q, want the extracted /boot/vmlinuz", ref, k)
		}
		if b, _ := os.ReadFile(dom.OS.Kernel); string(b) != "kernel" {
			t.Fatalf("%s: kernel content %q", ref, b)
		}
	}
}

// TestContainerDiskUnlisted: an image neither in images.json nor in the
// local containers-storage is refused naming both places.
func TestContainerDiskUnlisted(t *testing.T) {
	images, _ := testImages(t)
	absent := filepath.Join(t.TempDir(), "absent")
	images.UseContainerDisks(containerdisk.Options{CacheDir: t.TempDir(), StorageRoot: absent})
	_, err := images.Disk("quay.io/kubevirt/cirros-container-disk-demo:devel", "")
	for _, want := range []string{`unknown image "quay.io/kubevirt/cirros-container-disk-demo:devel"`, "knows example.com/guest:1", "no containers-storage at " + absent} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to contain %q", err, want)
		}
	}
}
