package nodeagent

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

func p64(i int64) *int64 { return &i }

// nonRootLauncherPod is a launcher pod's security settings as KubeVirt
// v1.6.0's virt-controller renders them without the Root feature gate
// (template.go computePodSecurityContext, rendercontainer.go
// securityContext): the pod runs as 107:107 with fsGroup 107, and compute
// says runAsUser and runAsGroup 107 again.
func nonRootLauncherPod() *k8sv1.Pod {
	return &k8sv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-a-x", Namespace: "ns", UID: "u1"},
		Spec: k8sv1.PodSpec{NodeName: "n1",
			SecurityContext: &k8sv1.PodSecurityContext{RunAsUser: p64(107), RunAsGroup: p64(107), FSGroup: p64(107), RunAsNonRoot: new(bool)},
			Volumes:         []k8sv1.Volume{{Name: "sockets", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}}},
			Containers: []k8sv1.Container{{Name: computeContainer, Image: "img:1", Command: []string{"/usr/bin/virt-launcher-monitor"},
				SecurityContext: &k8sv1.SecurityContext{RunAsUser: p64(107), RunAsGroup: p64(107)},
				VolumeMounts:    []k8sv1.VolumeMount{{Name: "sockets", MountPath: "/var/run/kubevirt/sockets"}}}},
		},
	}
}

// flagValues lists the values of every occurrence of flag in args.
func flagValues(args []string, flag string) []string {
	var vs []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			vs = append(vs, args[i+1])
		}
	}
	return vs
}

// TestKubeletRunsAContainerAsThePodsUser checks kubelet's reading of the
// securityContext in a container's podman command line: the user and
// group as --user, fsGroup and supplementalGroups as --group-add, the
// container's settings over the pod's, and the capability cache in the
// user's own sub-folder.
func TestKubeletRunsAContainerAsThePodsUser(t *testing.T) {
	m := &KubeletMode{PodsDir: "/k/pods", Devices: &fakeDevices{asked: map[string]int{}}, CacheDir: "/cache"}
	pod := nonRootLauncherPod()
	args, err := m.runArgs(context.Background(), "n1", pod, pod.Spec.Containers[0], "/proc/9/ns/net", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if got := flagValues(args, "--user"); !slices.Equal(got, []string{"107:107"}) {
		t.Errorf("--user %v, want [107:107]:\n%s", got, strings.Join(args, " "))
	}
	if got := flagValues(args, "--group-add"); !slices.Equal(got, []string{"107"}) {
		t.Errorf("--group-add %v, want [107] (fsGroup)", got)
	}
	if !slices.Contains(flagValues(args, "-v"), "/cache/uid-107:/var/cache/crashloop/qemu-capabilities") {
		t.Errorf("the capability cache is not uid 107's own: %v", flagValues(args, "-v"))
	}
	// The flags come before the image: podman would pass them to the program.
	if img := slices.Index(args, "img:1"); img < 0 || slices.Index(args, "--user") > img || slices.Index(args, "--group-add") > img {
		t.Errorf("--user/--group-add after the image:\n%s", strings.Join(args, " "))
	}

	cases := []struct {
		name           string
		pod            *k8sv1.PodSecurityContext
		ctr            *k8sv1.SecurityContext
		user, groupAdd []string
	}{
		{name: "nothing set: the image's user", user: nil, groupAdd: nil},
		{name: "the pod's only", pod: &k8sv1.PodSecurityContext{RunAsUser: p64(107), RunAsGroup: p64(108)}, user: []string{"107:108"}},
		{name: "the container wins", pod: &k8sv1.PodSecurityContext{RunAsUser: p64(107), RunAsGroup: p64(107), FSGroup: p64(107)},
			ctr: &k8sv1.SecurityContext{RunAsUser: p64(0)}, user: []string{"0:107"}, groupAdd: []string{"107"}},
		{name: "user without group: the image's group for that user", ctr: &k8sv1.SecurityContext{RunAsUser: p64(1000)}, user: []string{"1000"}},
		{name: "root with fsGroup (the Root gate)", pod: &k8sv1.PodSecurityContext{RunAsUser: p64(0), FSGroup: p64(107), SupplementalGroups: []int64{5, 6}},
			user: []string{"0"}, groupAdd: []string{"107", "5", "6"}},
		{name: "group without user has no podman form", pod: &k8sv1.PodSecurityContext{RunAsGroup: p64(107)}},
	}
	for _, c := range cases {
		pod := nonRootLauncherPod()
		pod.Spec.SecurityContext, pod.Spec.Containers[0].SecurityContext = c.pod, c.ctr
		args, err := m.runArgs(context.Background(), "n1", pod, pod.Spec.Containers[0], "/proc/9/ns/net", netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		if got := flagValues(args, "--user"); !slices.Equal(got, c.user) {
			t.Errorf("%s: --user %v, want %v", c.name, got, c.user)
		}
		if got := flagValues(args, "--group-add"); !slices.Equal(got, c.groupAdd) {
			t.Errorf("%s: --group-add %v, want %v", c.name, got, c.groupAdd)
		}
	}
}

// TestPodmanRuntimeRunsAsThePodsUser checks the podman runtime's command
// line (cluster-lite's direct and KubeVirt launcher modes) for a pod's
// RunAs, and that the zero RunAs leaves the image's user.
func TestPodmanRuntimeRunsAsThePodsUser(t *testing.T) {
	r := &Podman{CacheDir: "/cache"}
	spec := launchrt.Spec{Dir: "/work/p", Args: []string{"x"}, Pod: launchrt.Pod{Namespace: "ns", Name: "p", UID: "u", Image: "img:1",
		RunAs: runAsOf(nonRootLauncherPod(), computeOf(nonRootLauncherPod()))}}
	args := r.RunArgs(spec)
	if got := flagValues(args, "--user"); !slices.Equal(got, []string{"107:107"}) {
		t.Errorf("--user %v, want [107:107]:\n%s", got, strings.Join(args, " "))
	}
	if got := flagValues(args, "--group-add"); !slices.Equal(got, []string{"107"}) {
		t.Errorf("--group-add %v, want [107]", got)
	}
	if !slices.Contains(flagValues(args, "-v"), "/cache/uid-107:/var/cache/crashloop/qemu-capabilities") {
		t.Errorf("the capability cache is not uid 107's own: %v", flagValues(args, "-v"))
	}
	if img := slices.Index(args, "img:1"); slices.Index(args, "--user") > img {
		t.Errorf("--user after the image:\n%s", strings.Join(args, " "))
	}
	spec.Pod.RunAs = launchrt.RunAs{}
	args = r.RunArgs(spec)
	if slices.Contains(args, "--user") || slices.Contains(args, "--group-add") {
		t.Errorf("no securityContext, yet:\n%s", strings.Join(args, " "))
	}
	if !slices.Contains(flagValues(args, "-v"), "/cache:/var/cache/crashloop/qemu-capabilities") {
		t.Errorf("no user: the shared cache itself, got %v", flagValues(args, "-v"))
	}
}

// TestVolumeOwnershipIsKubeletsFSGroup checks an emptyDir of a pod with
// fsGroup as kubelet's SetVolumeOwnership leaves it: everything group-owned
// by fsGroup, user and group read-write, folders setgid and searchable; and
// that the launch folder and the cache are handed to the pod's user.
func TestVolumeOwnershipIsKubeletsFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to another needs root")
	}
	dir := t.TempDir()
	vol := filepath.Join(dir, "sockets")
	if err := os.MkdirAll(filepath.Join(vol, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "sub", "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(vol, "link")); err != nil {
		t.Fatal(err)
	}
	if err := setVolumeOwnership(vol, p64(107)); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{vol: os.ModeDir | os.ModeSetgid | 0o775, filepath.Join(vol, "sub"): os.ModeDir | os.ModeSetgid | 0o775,
		filepath.Join(vol, "sub", "f"): 0o660} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != 107 {
			t.Errorf("%s: group %d, want 107", path, gid)
		}
	}
	if fi, _ := os.Stat("/etc/passwd"); fi.Sys().(*syscall.Stat_t).Gid == 107 {
		t.Errorf("a symlink was followed out of the volume")
	}

	runAs := runAsOf(nonRootLauncherPod(), computeOf(nonRootLauncherPod()))
	if err := prepareUserCacheDir(filepath.Join(dir, "cache"), runAs); err != nil {
		t.Fatal(err)
	}
	launch := filepath.Join(dir, "launch")
	if err := os.Mkdir(launch, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := handTo(launch, runAs); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "cache", "uid-107"), launch} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 107 || st.Gid != 107 {
			t.Errorf("%s: owner %d:%d, want 107:107", path, st.Uid, st.Gid)
		}
	}
	// No user: nothing is handed over, no sub-folder made.
	if err := prepareUserCacheDir(filepath.Join(dir, "cache2"), launchrt.RunAs{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache2")); !os.IsNotExist(err) {
		t.Errorf("a cache folder was made for a pod without a user: %v", err)
	}
}
