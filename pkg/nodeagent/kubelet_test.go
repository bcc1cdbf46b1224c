package nodeagent

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeDevices answers Allocate with one device per resource.
type fakeDevices struct{ asked map[string]int }

func (f *fakeDevices) Healthy() map[string]int {
	return map[string]int{"devices.kubevirt.io/kvm": 1000}
}
func (f *fakeDevices) Allocate(_ context.Context, resource string, n int) ([]string, error) {
	f.asked[resource] = n
	if resource != "devices.kubevirt.io/kvm" {
		return nil, errors.New("resource " + resource + ": no device plugin registered")
	}
	return []string{"/dev/kvm:/dev/kvm:rw"}, nil
}

func TestKubeletRunArgsOfALauncherPodContainer(t *testing.T) {
	hostToContainer := k8sv1.MountPropagationHostToContainer
	pod := &k8sv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-a-x", Namespace: "ns", UID: "u1"},
		Spec: k8sv1.PodSpec{NodeName: "n1", Volumes: []k8sv1.Volume{
			{Name: "sockets", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}},
			{Name: "container-disks", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}},
			{Name: "podinfo", VolumeSource: k8sv1.VolumeSource{DownwardAPI: &k8sv1.DownwardAPIVolumeSource{}}},
		}},
	}
	ctr := k8sv1.Container{Name: computeContainer, Image: "img:1", Command: []string{"/usr/bin/virt-launcher-monitor", "--name", "a"},
		VolumeMounts: []k8sv1.VolumeMount{{Name: "sockets", MountPath: "/var/run/kubevirt/sockets"},
			{Name: "container-disks", MountPath: "/var/run/kubevirt/container-disks", MountPropagation: &hostToContainer},
			{Name: "podinfo", MountPath: "/etc/podinfo"}},
		Env: []k8sv1.EnvVar{{Name: "A", Value: "1"}, {Name: "POD", ValueFrom: &k8sv1.EnvVarSource{FieldRef: &k8sv1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "IP", ValueFrom: &k8sv1.EnvVarSource{FieldRef: &k8sv1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
		Resources: k8sv1.ResourceRequirements{Limits: k8sv1.ResourceList{"devices.kubevirt.io/kvm": resource.MustParse("1"), k8sv1.ResourceMemory: resource.MustParse("1Gi")}},
	}
	devs := &fakeDevices{asked: map[string]int{}}
	m := &KubeletMode{PodsDir: "/k/pods", Devices: devs, ImageDir: "/images", CacheDir: "/cache"}
	args, err := m.runArgs(context.Background(), "n1", pod, ctr, "/proc/9/ns/net", netip.MustParseAddr("10.244.0.7"))
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"podman run --pull never --runtime runc --name k8s_compute_virt-launcher-a-x_ns_u1_0 --network ns:/proc/9/ns/net",
		// kubelet's hostname and hosts entry: the own name resolves without DNS
		"--hostname virt-launcher-a-x --add-host virt-launcher-a-x:10.244.0.7 ",
		"-v /k/pods/u1/volumes/kubernetes.io~empty-dir/sockets:/var/run/kubevirt/sockets ",
		"-v /k/pods/u1/volumes/kubernetes.io~empty-dir/container-disks:/var/run/kubevirt/container-disks:rslave ",
		"-e A=1 -e POD=virt-launcher-a-x ", "--device /dev/kvm:/dev/kvm:rw",
		"--memory 1073741824 --memory-swap 1073741824", "--entrypoint /usr/bin/virt-launcher-monitor img:1 --name a",
		"--label " + LabelContainerName + "=compute", "--ulimit nofile=20000:20000",
	} {
		if !strings.Contains(line+" ", want) {
			t.Errorf("run args lack %q:\n%s", want, line)
		}
	}
	// No image folder in compute: it reads virt-handler's bind mounts.
	// No --rm: an ended container's record in podman is its status, kept
	// until the pod goes.
	for _, not := range []string{"--rm", "podinfo", "IP=", "--network none", "--privileged", imageDirInImage} {
		if strings.Contains(line, not) {
			t.Errorf("run args have %q:\n%s", not, line)
		}
	}
	if devs.asked["devices.kubevirt.io/kvm"] != 1 {
		t.Errorf("Allocate calls %v, want kvm 1", devs.asked)
	}
	ctr.Resources.Limits = k8sv1.ResourceList{"devices.kubevirt.io/tun": resource.MustParse("1")}
	if _, err := m.runArgs(context.Background(), "n1", pod, ctr, "/proc/9/ns/net", netip.Addr{}); err == nil || !strings.Contains(err.Error(), "container compute: resource devices.kubevirt.io/tun") {
		t.Errorf("a resource no plugin serves: err %v", err)
	}
}

func TestImageFolderFromTheIndex(t *testing.T) {
	dir := t.TempDir()
	index := `{"localhost/g:latest": "g", "localhost/c:latest": "c.oci.tar", "/abs:1": "/x/y"}`
	if err := os.WriteFile(filepath.Join(dir, "images.json"), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := imageFolder(dir, "localhost/g:latest"); err != nil || got != filepath.Join(dir, "g") {
		t.Errorf("folder image: %q %v", got, err)
	}
	if got, err := imageFolder(dir, "/abs:1"); err != nil || got != "/x/y" {
		t.Errorf("absolute folder: %q %v", got, err)
	}
	for _, image := range []string{"localhost/c:latest", "localhost/none:latest"} {
		if _, err := imageFolder(dir, image); err == nil || !strings.Contains(err.Error(), "neither in podman's store nor a folder") {
			t.Errorf("image %s: err %v", image, err)
		}
	}
	if _, err := imageFolder(t.TempDir(), "x"); err == nil || !strings.Contains(err.Error(), "has no index") {
		t.Errorf("no index: err %v", err)
	}
}

func TestPodHostnameIsKubeletsChoice(t *testing.T) {
	for _, tc := range []struct {
		pod  k8sv1.Pod
		want string
	}{
		{k8sv1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm1-abcde"}}, "virt-launcher-vm1-abcde"},
		{k8sv1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm1-abcde"}, Spec: k8sv1.PodSpec{Hostname: "vm1"}}, "vm1"},
		{k8sv1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 62) + "-b"}}, strings.Repeat("a", 62)},
	} {
		if got := podHostname(&tc.pod); got != tc.want {
			t.Errorf("pod %q hostname %q: got %q, want %q", tc.pod.Name, tc.pod.Spec.Hostname, got, tc.want)
		}
	}
}
