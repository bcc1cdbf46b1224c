package cloudinit

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

func testVMI() *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1", UID: "uid-1"},
		Spec:       v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Firmware: &v1.Firmware{UUID: "5a9fc181-957e-5c32-9e5a-2de5e9673531"}}},
	}
}

// readISO extracts every file of an ISO with xorriso, as the guest would
// see them through Rock Ridge.
func readISO(t *testing.T, iso string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso extract: %v: %s", err, out)
	}
	files := map[string]string{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			files[rel] = string(data)
		}
		return nil
	})
	return files
}

func TestISO(t *testing.T) {
	if _, err := exec.LookPath("xorrisofs"); err != nil {
		t.Skip("xorrisofs not installed (Debian package xorriso; make deps installs it)")
	}
	script := "#!/bin/sh\necho hello\n"
	net := "version: 2\nethernets: {eth0: {dhcp4: true}}\n"
	tests := []struct {
		name  string
		vol   v1.VolumeSource
		label string
		files map[string]string
	}{
		{"noCloud", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: script, NetworkDataBase64: base64.StdEncoding.EncodeToString([]byte(net))}},
			"cidata", map[string]string{
				"user-data":      script,
				"meta-data":      `{"instance-id":"5a9fc181-957e-5c32-9e5a-2de5e9673531","local-hostname":"vm1"}`,
				"network-config": net,
			}},
		{"configDrive", v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserDataBase64: base64.StdEncoding.EncodeToString([]byte(script)), NetworkData: `{"links":[]}`}},
			"config-2", map[string]string{
				"openstack/latest/user_data":         script,
				"openstack/latest/meta_data.json":    `{"instance_id":"vm1.ns1","hostname":"vm1","uuid":"5a9fc181-957e-5c32-9e5a-2de5e9673531"}`,
				"openstack/latest/network_data.json": `{"links":[]}`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := FromVolume(testVMI(), &v1.Volume{Name: "ci", VolumeSource: tt.vol}, "spec.volumes[0]")
			if err != nil {
				t.Fatalf("FromVolume: %v", err)
			}
			dir := t.TempDir()
			iso, err := d.WriteISO(context.Background(), dir, "ci.iso")
			if err != nil {
				t.Fatalf("WriteISO: %v", err)
			}
			if fi, err := os.Stat(iso); err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(iso) != dir {
				t.Fatalf("ISO %s: %v, %v; want mode 0600 in %s", iso, fi, err, dir)
			}
			if label, err := volumeLabel(iso); err != nil || label != tt.label {
				t.Fatalf("label = %q, %v; want %q", label, err, tt.label)
			}
			if diff := cmp.Diff(tt.files, readISO(t, iso)); diff != "" {
				t.Fatalf("files (-want +got):\n%s", diff)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Fatalf("staging left behind: %v", entries)
			}
		})
	}
}

func TestFromVolumeErrors(t *testing.T) {
	ref := &k8sv1.LocalObjectReference{Name: "s"}
	for _, tt := range []struct {
		name, field string
		vol         v1.VolumeSource
	}{
		{"secret", "spec.volumes[0].cloudInitNoCloud.secretRef", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataSecretRef: ref}}},
		{"network secret", "spec.volumes[0].cloudInitConfigDrive.networkDataSecretRef", v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "x", NetworkDataSecretRef: ref}}},
		{"bad base64", "spec.volumes[0].cloudInitNoCloud.userDataBase64", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataBase64: "!!"}}},
		{"both", "spec.volumes[0].cloudInitNoCloud.userDataBase64", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "a", UserDataBase64: "YQ=="}}},
		{"nothing", "spec.volumes[0].cloudInitNoCloud.userData", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromVolume(testVMI(), &v1.Volume{Name: "ci", VolumeSource: tt.vol}, "spec.volumes[0]")
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("err = %v, want field %s", err, tt.field)
			}
			if strings.Contains(tt.name, "secret") && !strings.Contains(err.Error(), "no cluster secrets") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestInlineDataCappedAsKubeVirt: inline userData and networkData, plain or
// base64, of more than 2048 bytes are refused in KubeVirt's words; 2048
// bytes are taken.
func TestInlineDataCappedAsKubeVirt(t *testing.T) {
	big, limit := strings.Repeat("a", 2049), strings.Repeat("a", 2048)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tt := range []struct {
		name, field, words string
		vol                v1.VolumeSource
	}{
		{"userData", "spec.volumes[0].cloudInitNoCloud.userData", "spec.volumes[0].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data.",
			v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: big}}},
		{"userDataBase64", "spec.volumes[0].cloudInitConfigDrive.userDataBase64", "userdata exceeds 2048 byte limit",
			v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserDataBase64: b64(big)}}},
		{"networkData", "spec.volumes[0].cloudInitConfigDrive.networkData", "networkdata exceeds 2048 byte limit. Should use NetworkDataSecretRef for larger data.",
			v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "x", NetworkData: big}}},
		{"networkDataBase64", "spec.volumes[0].cloudInitNoCloud.networkDataBase64", "NetworkDataSecretRef",
			v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{NetworkDataBase64: b64(big)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromVolume(testVMI(), &v1.Volume{Name: "ci", VolumeSource: tt.vol}, "spec.volumes[0]")
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.words) || !strings.Contains(err.Error(), "2049 bytes") {
				t.Fatalf("err = %v, want field %s saying %q", err, tt.field, tt.words)
			}
		})
	}
	ok := v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: limit, NetworkDataBase64: b64(limit)}}
	if _, err := FromVolume(testVMI(), &v1.Volume{Name: "ci", VolumeSource: ok}, "spec.volumes[0]"); err != nil {
		t.Fatalf("2048 bytes each: %v", err)
	}
}
