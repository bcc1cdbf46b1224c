package converter

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func dvTemplate(name string, src *cdiv1.DataVolumeSource) v1.DataVolumeTemplateSpec {
	return v1.DataVolumeTemplateSpec{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: cdiv1.DataVolumeSpec{
		Source: src,
		Storage: &cdiv1.StorageSpec{Resources: k8sv1.VolumeResourceRequirements{Requests: k8sv1.ResourceList{
			k8sv1.ResourceStorage: resource.MustParse("4Mi")}}},
	}}
}

// TestDataVolumeTemplates: a registry or blank DataVolume is imported into
// the claim folder as CDI would (raw, grown to the claim's size), once; a
// dry run imports nothing; other sources are refused by name.
func TestDataVolumeTemplates(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed (make deps)")
	}
	images, _ := testImages(t)
	url := "docker://example.com/guest:1"
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
		{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "root-dv"}}},
		{Name: "data", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "blank-dv"}}}}
	dvts := []v1.DataVolumeTemplateSpec{
		dvTemplate("root-dv", &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: &url}}),
		dvTemplate("blank-dv", &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}),
	}
	claims := filepath.Join(t.TempDir(), "claims")
	opts := DomainOptions{Accel: AccelTCG, Images: images, ClaimDir: claims, DataVolumeTemplates: dvts, DryRun: true}
	if _, err := Convert(context.Background(), vmi, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(claims); !os.IsNotExist(err) {
		t.Fatalf("dry run made the claim folder: %v", err)
	}
	opts.DryRun = false
	conv, err := Convert(context.Background(), vmi, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"root-dv", "blank-dv"} {
		p := filepath.Join(claims, name, "disk.img")
		if fi, err := os.Stat(p); err != nil || fi.Size() != 4<<20 {
			t.Fatalf("%s: %v %v, want a 4 MiB raw image", p, fi, err)
		}
		if got := conv.Domain.Devices.Disks[i].Source.File.File; got != p {
			t.Fatalf("disk %d source %s, want %s", i, got, p)
		}
	}
	// The claim persists: a second launch does not import again.
	os.WriteFile(filepath.Join(claims, "root-dv", "disk.img"), []byte("written by the guest"), 0o644)
	if _, err := Convert(context.Background(), vmi, opts); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(claims, "root-dv", "disk.img")); string(data) != "written by the guest" {
		t.Fatal("an existing claim was imported again")
	}
	opts.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{dvTemplate("root-dv2", &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://x/disk.img"}})}
	vmi.Spec.Volumes[0].DataVolume.Name = "root-dv2"
	_, err = Convert(context.Background(), vmi, opts)
	if err == nil || !strings.HasPrefix(err.Error(), "field spec.dataVolumeTemplates[0].spec.source: only registry and blank sources") {
		t.Fatalf("http source: %v, want a refusal naming the source", err)
	}
}
