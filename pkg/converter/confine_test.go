package converter

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/crashloop-harness/crashloop/pkg/overlay"
)

// escapeTree is a temporary tree for an escape test: the per-VMI folder
// and the claim folder three levels down, so that names with up to three
// "../" land inside the tree (and are seen) rather than anywhere on the
// host.
type escapeTree struct {
	top, scratch, claims, outside string
	// before are the files outside the launcher's folders at the start,
	// with their contents.
	before map[string]string
}

func newEscapeTree(t *testing.T) *escapeTree {
	t.Helper()
	top := t.TempDir()
	e := &escapeTree{top: top, scratch: filepath.Join(top, "a", "b", "c", "scratch"), claims: filepath.Join(top, "a", "b", "c", "claims"), outside: filepath.Join(top, "outside")}
	for _, d := range []string{e.scratch, e.claims, e.outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Files an escape would replace: the ones the names below aim at.
	for _, f := range []string{"outside/victim", "outside/y.qcow2", "outside/y.iso", "a/b/x_VARS.fd", "a/b/c/x_VARS.fd"} {
		p := filepath.Join(top, f)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("original"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.before = e.outsideFiles(t)
	return e
}

// outsideFiles lists the files (and symbolic links) of the tree that are
// not inside the per-VMI folder or the claim folder.
func (e *escapeTree) outsideFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(e.top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == e.scratch || p == e.claims {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			data, _ := os.ReadFile(p)
			files[p] = string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// check fails the test when a file outside the launcher's folders appeared
// or changed.
func (e *escapeTree) check(t *testing.T) {
	t.Helper()
	after := e.outsideFiles(t)
	for p, data := range after {
		if old, ok := e.before[p]; !ok {
			t.Errorf("a file appeared outside the launcher's folders: %s", p)
		} else if old != data {
			t.Errorf("a file outside the launcher's folders was overwritten: %s", p)
		}
	}
	for p := range e.before {
		if _, ok := after[p]; !ok {
			t.Errorf("a file outside the launcher's folders was removed: %s", p)
		}
	}
}

func (e *escapeTree) options(t *testing.T, images *ImageStore) DomainOptions {
	return DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: e.scratch, ClaimDir: e.claims, OVMF: fakeOVMF(t)}
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
}

func efi(vmi *v1.VirtualMachineInstance) {
	vmi.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: off()}}
}

// TestNamesCannotLeaveTheirFolders converts VMIs whose volume names,
// metadata.name or claim names climb out of the per-VMI folder, with no
// admission check in front of the converter: the conversion must fail
// naming the field, and no file outside the folders may appear or change.
func TestNamesCannotLeaveTheirFolders(t *testing.T) {
	needTools(t, "qemu-img", "xorrisofs")
	images, root := testImages(t)
	os.WriteFile(filepath.Join(root, "disk/disk.img"), make([]byte, 1<<20), 0o644)
	gi := resource.MustParse("1Mi")
	volume := func(name string, src v1.VolumeSource) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: name}}
			vmi.Spec.Volumes = []v1.Volume{{Name: name, VolumeSource: src}}
		}
	}
	empty := v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: gi}}
	cloud := v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}
	cd := v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}
	for _, tt := range []struct {
		name  string
		edit  func(*v1.VirtualMachineInstance)
		field string
	}{
		// The file name's prefix ("emptydisk-..") eats one "..", the
		// next cancels it, the other four climb to the tree's top.
		{"emptyDisk ../x", volume("../x", empty), "spec.volumes[0].name"},
		{"emptyDisk new file outside", volume("../../../../../../outside/x", empty), "spec.volumes[0].name"},
		{"emptyDisk over a file outside", volume("../../../../../../outside/y", empty), "spec.volumes[0].name"},
		{"cloud-init new file outside", volume("../../../../../../outside/x", cloud), "spec.volumes[0].name"},
		{"cloud-init over a file outside", volume("../../../../../../outside/y", cloud), "spec.volumes[0].name"},
		{"containerDisk overlay new file outside", volume("../../../../../../outside/x", cd), "spec.volumes[0].name"},
		{"containerDisk overlay over a file outside", volume("../../../../../../outside/y", cd), "spec.volumes[0].name"},
		{"empty volume name", volume("", empty), "spec.volumes[0].name"},
		{"EFI vars metadata.name ../../x", func(vmi *v1.VirtualMachineInstance) { vmi.Name = "../../x"; efi(vmi) }, "metadata.name"},
		{"EFI vars metadata.name ../x", func(vmi *v1.VirtualMachineInstance) { vmi.Name = "../x"; efi(vmi) }, "metadata.name"},
		{"EFI vars metadata.name ..", func(vmi *v1.VirtualMachineInstance) { vmi.Name = ".."; efi(vmi) }, "metadata.name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEscapeTree(t)
			vmi := baseVMI()
			tt.edit(vmi)
			_, err := Convert(context.Background(), vmi, e.options(t, images))
			e.check(t)
			var se *SpecError
			if !errors.As(err, &se) || se.Field != tt.field {
				t.Errorf("err = %v, want a SpecError naming %s", err, tt.field)
			}
		})
	}
}

// TestClaimNamesCannotLeaveTheClaimFolder: a dataVolume template whose
// name climbs out, and claim folders that are symbolic links to the
// outside, are refused without a file written (or read) outside.
func TestClaimNamesCannotLeaveTheClaimFolder(t *testing.T) {
	images, _ := testImages(t)
	dv := func(name string) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: name}}}}
		}
	}
	pvc := func(name string) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}}
		}
	}
	for _, tt := range []struct {
		name  string
		claim string
		link  bool // claims/NAME is a symbolic link to outside/
		edit  func(*v1.VirtualMachineInstance)
		field string
	}{
		{"dataVolume template ../../../../outside", "../../../../outside", false, dv("../../../../outside"), "spec.dataVolumeTemplates[0].metadata.name"},
		{"dataVolume claim folder is a link outside", "evil", true, dv("evil"), "spec.dataVolumeTemplates[0]"},
		{"persistentVolumeClaim folder is a link outside", "evil", true, pvc("evil"), "spec.volumes[0].persistentVolumeClaim.claimName"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEscapeTree(t)
			if tt.link {
				if err := os.Symlink(e.outside, filepath.Join(e.claims, tt.claim)); err != nil {
					t.Fatal(err)
				}
			}
			vmi := baseVMI()
			tt.edit(vmi)
			opts := e.options(t, images)
			opts.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{dvTemplate(tt.claim, &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}})}
			if tt.name == "persistentVolumeClaim folder is a link outside" {
				os.WriteFile(filepath.Join(e.outside, "disk.img"), []byte("host file"), 0o600)
				e.before = e.outsideFiles(t)
			}
			_, err := Convert(context.Background(), vmi, opts)
			e.check(t)
			var se *SpecError
			if !errors.As(err, &se) || se.Field != tt.field {
				t.Errorf("err = %v, want a SpecError naming %s", err, tt.field)
			}
		})
	}
}

// TestPlantedLinksInThePerVMIFolder: a symbolic link planted in the per-VMI
// folder under the name of a file the conversion makes is not followed
// out of the folder.
func TestPlantedLinksInThePerVMIFolder(t *testing.T) {
	needTools(t, "qemu-img", "xorrisofs")
	images, root := testImages(t)
	os.WriteFile(filepath.Join(root, "disk/disk.img"), make([]byte, 1<<20), 0o644)
	gi := resource.MustParse("1Mi")
	for _, tt := range []struct {
		name, link string
		edit       func(*v1.VirtualMachineInstance)
	}{
		{"emptyDisk", "emptydisk-data.qcow2", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "data"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: gi}}}}
		}},
		{"containerDisk overlay", "overlay-root.qcow2", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}}}
		}},
		{"cloud-init ISO", "cloudinit-ci.iso", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "ci"}}
			vmi.Spec.Volumes = []v1.Volume{{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}}}
		}},
		{"EFI vars", "vm1_VARS.fd", efi},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEscapeTree(t)
			if err := os.Symlink(filepath.Join(e.outside, "victim"), filepath.Join(e.scratch, tt.link)); err != nil {
				t.Fatal(err)
			}
			vmi := baseVMI()
			tt.edit(vmi)
			_, err := Convert(context.Background(), vmi, e.options(t, images))
			e.check(t)
			if err == nil {
				t.Errorf("Convert succeeded over a planted link %s", tt.link)
			}
		})
	}
}

// qcow2WithBacking is the start of a qcow2 image whose backing file is
// the host file path, as a guest could write it into its raw disk.
func qcow2WithBacking(path string) []byte {
	h := make([]byte, 512)
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:], 2)   // version
	binary.BigEndian.PutUint64(h[8:], 104) // backing_file_offset
	binary.BigEndian.PutUint32(h[16:], uint32(len(path)))
	binary.BigEndian.PutUint32(h[20:], 16)    // cluster_bits
	binary.BigEndian.PutUint64(h[24:], 1<<20) // size
	copy(h[104:], path)
	return h
}

// TestGuestWritableDisksAreRaw: a claim, a dataVolume's claim and a host
// disk holding a qcow2 header with a backing file are attached as raw, as
// KubeVirt attaches them, so that QEMU never follows the backing file.
func TestGuestWritableDisksAreRaw(t *testing.T) {
	images, _ := testImages(t)
	claims := t.TempDir()
	header := qcow2WithBacking("/etc/shadow")
	for _, c := range []string{"pvc", "dv"} {
		os.MkdirAll(filepath.Join(claims, c), 0o700)
		os.WriteFile(filepath.Join(claims, c, "disk.img"), header, 0o600)
	}
	host := filepath.Join(t.TempDir(), "host.img")
	os.WriteFile(host, header, 0o600)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "pvc"}, {Name: "dv"}, {Name: "host"}, {Name: "eph"}}
	vmi.Spec.Volumes = []v1.Volume{
		{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}}}},
		{Name: "dv", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: host, Type: v1.HostDiskExists}}},
		{Name: "eph", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{PersistentVolumeClaim: &k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}}}},
	}
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ClaimDir: claims})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range roundTrip(t, conv.Domain).Devices.Disks {
		if d.Driver.Type != "raw" {
			t.Errorf("disk %s (%s) has type=%q, want raw", d.Alias.Name, d.Source.File.File, d.Driver.Type)
		}
		if d.BackingStore != nil && d.BackingStore.Format != nil && d.BackingStore.Format.Type != "raw" {
			t.Errorf("disk %s has a backing store of format %q, want raw", d.Alias.Name, d.BackingStore.Format.Type)
		}
	}
}

// TestContainerDiskWithBackingFileRefused: a containerDisk image that is a
// qcow2 with a backing file is refused, as KubeVirt's virt-handler refuses
// it (VerifyImage), and a plain one names its format in the backing store.
func TestContainerDiskWithBackingFileRefused(t *testing.T) {
	needTools(t, "qemu-img")
	images, root := testImages(t)
	disk := filepath.Join(root, "disk/disk.img")
	os.WriteFile(disk, qcow2WithBacking("/etc/shadow"), 0o644)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}}}
	_, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "backing file") {
		t.Fatalf("err = %v, want a refusal of the backing file", err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", disk+".new", "1M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	os.Rename(disk+".new", disk)
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	d := roundTrip(t, conv.Domain).Devices.Disks[0]
	if d.Driver.Type != "qcow2" || d.BackingStore == nil || d.BackingStore.Format.Type != "qcow2" {
		t.Fatalf("driver %+v, backing store %+v: want a qcow2 overlay over a qcow2 image", d.Driver, d.BackingStore)
	}
}

// TestConversionFileModes: the files a conversion writes into the
// per-VMI folder (overlay, empty disk, cloud-init ISO, UEFI variables) are
// 0600, its folders 0700, whatever the umask.
func TestConversionFileModes(t *testing.T) {
	needTools(t, "qemu-img", "xorrisofs")
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	images, root := testImages(t)
	os.WriteFile(filepath.Join(root, "disk/disk.img"), make([]byte, 1<<20), 0o644)
	gi := resource.MustParse("1Mi")
	scratch := filepath.Join(t.TempDir(), "vmi", "scratch")
	claims := t.TempDir()
	vmi := baseVMI()
	efi(vmi)
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}, {Name: "data"}, {Name: "ci"}, {Name: "dv"}}
	vmi.Spec.Volumes = []v1.Volume{
		{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/guest:1"}}},
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: gi}}},
		{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
		{Name: "dv", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}},
	}
	var pending []overlay.Pending
	opts := DomainOptions{Accel: AccelTCG, Images: images, ScratchDir: scratch, ClaimDir: claims, OVMF: fakeOVMF(t), Overlays: &pending,
		DataVolumeTemplates: []v1.DataVolumeTemplateSpec{dvTemplate("dv", &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}})}}
	if _, err := Convert(context.Background(), vmi, opts); err != nil {
		t.Fatal(err)
	}
	if err := overlay.WaitAll(pending); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, top := range []string{scratch, filepath.Join(claims, "dv")} {
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, _ := d.Info()
			want := fs.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
			}
			n++
			return nil
		})
	}
	if n < 7 {
		t.Errorf("checked %d entries, want the folders, the overlay (and its log), the empty disk, the ISO, the variables and the claim", n)
	}
}
