package nodeagent

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

func TestKubeVirtLayoutReadsTheComputeCommandAndItsEmptyDirs(t *testing.T) {
	pod := launcherPod("/usr/bin/virt-launcher-monitor", "--qemu-timeout", "250s")
	pod.Spec.Containers[0].Args = []string{"--name", "vm"}
	pod.Spec.Volumes = []k8sv1.Volume{
		{Name: "private", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}},
		{Name: "sockets", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}},
		{Name: "podinfo", VolumeSource: k8sv1.VolumeSource{DownwardAPI: &k8sv1.DownwardAPIVolumeSource{}}},
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, k8sv1.Volume{Name: "public", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}})
	pod.Spec.Containers[0].VolumeMounts = []k8sv1.VolumeMount{
		{Name: "private", MountPath: "/var/run/kubevirt-private"},
		{Name: "sockets", MountPath: "/var/run/kubevirt/sockets"},
		{Name: "podinfo", MountPath: "/etc/podinfo"},
		{Name: "public", MountPath: "/var/run/kubevirt"},
	}
	l, err := kubevirtLayout(pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/bin/virt-launcher-monitor", "--qemu-timeout", "250s", "--name", "vm"}; !slices.Equal(l.command, want) {
		t.Errorf("command %q, want %q", l.command, want)
	}
	// The nested sockets mount comes after public, which holds it.
	want := []podVolume{{"private", "/var/run/kubevirt-private"}, {"public", "/var/run/kubevirt"}, {"sockets", "/var/run/kubevirt/sockets"}}
	if !slices.Equal(l.volumes, want) {
		t.Errorf("volumes %v, want %v", l.volumes, want)
	}
	if !slices.Equal(l.skipped, []string{"podinfo"}) {
		t.Errorf("skipped %v, want the downward API volume", l.skipped)
	}

	if _, err := kubevirtLayout(launcherPod()); err == nil || !strings.Contains(err.Error(), `the "compute" container has no command`) {
		t.Errorf("no command: %v", err)
	}
	bad := launcherPod("/x")
	bad.Spec.Volumes = []k8sv1.Volume{{Name: "../x", VolumeSource: k8sv1.VolumeSource{EmptyDir: &k8sv1.EmptyDirVolumeSource{}}}}
	bad.Spec.Containers[0].VolumeMounts = []k8sv1.VolumeMount{{Name: "../x", MountPath: "/y"}}
	if _, err := kubevirtLayout(bad); err == nil || !strings.Contains(err.Error(), `volume name "../x"`) {
		t.Errorf("a volume name with a slash: %v", err)
	}
}

func TestPodmanRunArgsOfAKubeVirtPod(t *testing.T) {
	spec := launchrt.Spec{Path: "/usr/bin/virt-launcher-monitor", Args: []string{"--name", "vm"}, Dir: "/work/p",
		Pod: launchrt.Pod{Namespace: "default", Name: "virt-launcher-vm-abcde", UID: "u-1", Node: "node", Image: "img",
			Entrypoint: "/usr/bin/virt-launcher-monitor",
			Mounts: []launchrt.Mount{{Host: "/work/p/volumes/sockets", Container: "/var/run/kubevirt/sockets"},
				{Host: "/images", Container: "/usr/share/crashloop/images", ReadOnly: true}}}}
	got := strings.Join((&Podman{}).RunArgs(spec), " ")
	for _, want := range []string{"-v /work/p/volumes/sockets:/var/run/kubevirt/sockets ", "-v /images:/usr/share/crashloop/images:ro ",
		" --entrypoint /usr/bin/virt-launcher-monitor img --name vm"} {
		if !strings.Contains(got, want) {
			t.Errorf("podman %s\nlacks %q", got, want)
		}
	}
	if strings.Contains(got, "--init") {
		t.Errorf("the pod's own entry point is PID 1, as in a pod: %s", got)
	}
}

// fakeLauncher is a launcher that ends when told to, or on SIGTERM when
// it is a driver that obeys.
type fakeLauncher struct {
	done    chan struct{}
	exit    launchrt.Exit
	onTerm  func()
	signals []syscall.Signal
}

func newFake() *fakeLauncher { return &fakeLauncher{done: make(chan struct{})} }

func (f *fakeLauncher) end(code int) {
	f.exit = launchrt.Exit{Code: code}
	close(f.done)
}
func (f *fakeLauncher) ID() string            { return "fake" }
func (f *fakeLauncher) Ref() launchrt.Ref     { return launchrt.Ref{} }
func (f *fakeLauncher) Done() <-chan struct{} { return f.done }
func (f *fakeLauncher) Exit() launchrt.Exit   { return f.exit }
func (f *fakeLauncher) Signal(sig syscall.Signal) error {
	f.signals = append(f.signals, sig)
	if sig == syscall.SIGTERM && f.onTerm != nil {
		go f.onTerm()
	}
	return nil
}
func (f *fakeLauncher) Stop(context.Context, time.Duration) (bool, error) {
	select {
	case <-f.done:
	default:
		f.end(137)
	}
	return true, nil
}

func TestKubeVirtPodStopsThroughTheDriverAndEndsWithTheContainer(t *testing.T) {
	log, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	compute, driver := newFake(), newFake()
	// The driver's graceful stop deletes the domain: the container exits
	// 0, then the driver.
	driver.onTerm = func() { compute.end(0); driver.end(0) }
	k := &kubevirtPod{compute: compute, driver: driver, done: make(chan struct{}), log: slog.Default()}
	go k.watch(log)
	killed, err := k.Stop(context.Background(), time.Minute)
	if killed || err != nil {
		t.Fatalf("Stop: killed %v, %v; want a graceful end", killed, err)
	}
	if e := k.Exit(); e.Code != 0 {
		t.Errorf("exit %+v, want the container's 0", e)
	}
	if !slices.Equal(driver.signals, []syscall.Signal{syscall.SIGTERM}) {
		t.Errorf("driver got %v, want one SIGTERM", driver.signals)
	}

	// A container that crashes: the pod ends once the driver is stopped
	// too, with the container's code.
	compute, driver = newFake(), newFake()
	k = &kubevirtPod{compute: compute, driver: driver, done: make(chan struct{}), log: slog.Default()}
	go k.watch(log)
	compute.end(2)
	select {
	case <-k.Done():
	case <-time.After(driverAfterPod + 5*time.Second):
		t.Fatal("the pod did not end after its container and the driver")
	}
	if e := k.Exit(); e.Code != 2 {
		t.Errorf("exit %+v, want the container's 2", e)
	}
}
