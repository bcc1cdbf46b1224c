package converter

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
)

func hostDiskVMI(path string) *v1.VirtualMachineInstance {
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "hd", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "hd", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{
		Path: path, Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Mi")}}}}
	return vmi
}

// TestHostDiskOrCreate: KubeVirt creates a DiskOrCreate disk's missing
// folder; a dry run creates neither the folder nor the disk.
func TestHostDiskOrCreate(t *testing.T) {
	images, _ := testImages(t)
	path := filepath.Join(t.TempDir(), "var", "data", "disk.img")
	if _, err := Convert(context.Background(), hostDiskVMI(path), DomainOptions{Accel: AccelTCG, Images: images, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("dry run made %s: %v", filepath.Dir(path), err)
	}
	conv, err := Convert(context.Background(), hostDiskVMI(path), DomainOptions{Accel: AccelTCG, Images: images})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("host disk %s: %v %v", path, fi, err)
	}
	if got := conv.Domain.Devices.Disks[0].Source.File.File; got != path {
		t.Fatalf("disk source %s, want %s", got, path)
	}
}

// TestDryRunPicksNoPort: a dry run leaves the host port to the launch.
func TestDryRunPicksNoPort(t *testing.T) {
	images, _ := testImages(t)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}, Ports: []v1.Port{{Port: 22}}}}
	vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(conv.Ports) != 1 || conv.Ports[0].HostPort != 0 {
		t.Fatalf("ports = %+v, want one with host port 0 (chosen at launch)", conv.Ports)
	}
}

// TestRelativeClaimDir: a relative claim folder reaches the domain as an
// absolute path, since libvirt and QEMU do not share our working directory.
func TestRelativeClaimDir(t *testing.T) {
	images, _ := testImages(t)
	dir := t.TempDir()
	t.Chdir(dir)
	os.MkdirAll("claims/pvc1", 0o755)
	os.WriteFile("claims/pvc1/disk.img", []byte("raw"), 0o644)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "d", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}}}
	vmi.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "pvc1"
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, ClaimDir: "claims"})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "claims", "pvc1", "disk.img")
	if got := conv.Domain.Devices.Disks[0].Source.File.File; got != want {
		t.Fatalf("claim disk %s, want %s", got, want)
	}
}

// TestAbsoluteImageFolder: images.json may name an absolute folder.
func TestAbsoluteImageFolder(t *testing.T) {
	elsewhere := t.TempDir()
	os.MkdirAll(filepath.Join(elsewhere, "boot"), 0o755)
	os.WriteFile(filepath.Join(elsewhere, "boot", "vmlinuz"), []byte("k"), 0o644)
	dir := t.TempDir()
	index, _ := json.Marshal(map[string]string{"example.com/k:1": elsewhere})
	os.WriteFile(filepath.Join(dir, ImageIndexFile), index, 0o644)
	s, err := OpenImageStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.File("example.com/k:1", "/boot/vmlinuz")
	if err != nil || got != filepath.Join(elsewhere, "boot", "vmlinuz") {
		t.Fatalf("File = %q, %v; want the file under the absolute folder", got, err)
	}
}

// TestTapNICIsKubeVirtsEthernetInterface: with virt-handler's tap0 in the
// pod, a masquerade interface is KubeVirt's ethernet one, managed='no' on
// tap0 with eth0's MTU and MAC, no user-mode netdev and no port forward
// (virt-handler's NAT rules forward the ports); a MAC in the VMI wins.
func TestTapNICIsKubeVirtsEthernetInterface(t *testing.T) {
	images, _ := testImages(t)
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}, Ports: []v1.Port{{Port: 22}}}}
	vmi.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
	tap := &TapNIC{Device: "tap0", MTU: 1450, MAC: "0a:58:0a:f4:00:02"}
	conv, err := Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true, Tap: tap})
	if err != nil {
		t.Fatal(err)
	}
	xml, err := conv.Domain.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<interface type="ethernet">`, `<target dev="tap0" managed="no">`, `<mtu size="1450">`,
		`<mac address="0a:58:0a:f4:00:02">`, `<model type="virtio-non-transitional">`, `<alias name="ua-default">`, `<rom enabled="no">`} {
		if !strings.Contains(xml, want) {
			t.Errorf("domain lacks %s:\n%s", want, xml)
		}
	}
	if strings.Contains(xml, "netdev") || strings.Contains(xml, "type=\"user\"") || len(conv.Ports) != 0 {
		t.Errorf("a tap NIC with a user-mode netdev or forwards (ports %+v):\n%s", conv.Ports, xml)
	}
	vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:00:00:00:00:07"
	conv, err = Convert(context.Background(), vmi, DomainOptions{Accel: AccelTCG, Images: images, DryRun: true, Tap: tap})
	if err != nil {
		t.Fatal(err)
	}
	if m := conv.Domain.Devices.Interfaces[0].MAC; m == nil || m.Address != "02:00:00:00:00:07" {
		t.Fatalf("the VMI's MAC address: %+v", m)
	}
}
