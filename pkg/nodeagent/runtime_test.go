package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

func TestPodmanRunArgs(t *testing.T) {
	spec := launchrt.Spec{Args: []string{"--log-level", "info", "/work/p/vmi.yaml"}, Dir: "/work/p",
		Pod: launchrt.Pod{Namespace: "default", Name: "virt-launcher-vm-abcde", UID: "u-1", Node: "node",
			Image: "localhost/crashloop/virt-launcher:latest", ReadOnly: []string{"/images"},
			Resources: launchrt.Resources{MemoryLimit: 350 << 20, CPULimitMilli: 1500, CPURequestMilli: 100}}}
	r := &Podman{CacheDir: "/cache", KVM: true}
	got := strings.Join(r.RunArgs(spec), " ")
	for _, want := range []string{
		"run --rm --pull never --runtime runc --init --network none",
		"--name k8s_compute_virt-launcher-vm-abcde_default_u-1_0",
		"--label io.kubernetes.pod.uid=u-1", "--label io.kubernetes.pod.name=virt-launcher-vm-abcde",
		"--label io.kubernetes.pod.namespace=default", "--label io.kubernetes.container.name=compute", "--label dev.crashloop.node=node",
		"--ulimit nofile=20000:20000 --ulimit nproc=32768:32768",
		"-v /work/p:/work/p ", "-v /images:/images:ro", "-v /cache:/var/cache/crashloop/qemu-capabilities",
		"--device /dev/kvm",
		"--memory 367001600 --memory-swap 367001600", "--cpus 1.5", "--cpu-shares 102",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("podman %s\nlacks %q", got, want)
		}
	}
	if !strings.HasSuffix(got, " localhost/crashloop/virt-launcher:latest --log-level info /work/p/vmi.yaml") {
		t.Errorf("image and launcher arguments are not last: %s", got)
	}

	// No limits, no KVM, no cache: none of their flags.
	bare := strings.Join((&Podman{OCIRuntime: "crun"}).RunArgs(launchrt.Spec{Dir: "/d", Pod: launchrt.Pod{Image: "img"}}), " ")
	for _, absent := range []string{"--memory", "--cpus", "--cpu-shares", "/dev/kvm", "qemu-capabilities"} {
		if strings.Contains(bare, absent) {
			t.Errorf("podman %s has %q", bare, absent)
		}
	}
	if !strings.Contains(bare, "--runtime crun") {
		t.Errorf("OCIRuntime not used: %s", bare)
	}
	if cpuShares(1) != 2 || cpuShares(1000) != 1024 {
		t.Errorf("cpuShares(1)=%d cpuShares(1000)=%d, want kubelet's 2 and 1024", cpuShares(1), cpuShares(1000))
	}
}

func TestComputeResources(t *testing.T) {
	pod := launcherPod("virt-launcher")
	pod.Spec.Containers[0].Resources = k8sv1.ResourceRequirements{
		Limits:   k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("333Mi"), k8sv1.ResourceCPU: resource.MustParse("2")},
		Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("333Mi"), k8sv1.ResourceCPU: resource.MustParse("100m")},
	}
	image, res, err := computeResources(pod)
	if err != nil || image != "launcher" {
		t.Fatalf("image %q, %v", image, err)
	}
	if want := (launchrt.Resources{MemoryLimit: 333 << 20, CPULimitMilli: 2000, CPURequestMilli: 100}); res != want {
		t.Errorf("resources %+v, want %+v", res, want)
	}
	pod.Spec.Containers[0].Image = ""
	if _, _, err := computeResources(pod); err == nil || !strings.Contains(err.Error(), `the "compute" container has no image`) {
		t.Errorf("no image: %v", err)
	}
}

func TestPodmanExit(t *testing.T) {
	cases := []struct {
		name     string
		exit     launchrt.Exit
		started  bool
		oomKills int
		code     int
		reason   string
	}{
		{"exit 0", launchrt.Exit{Code: 0}, true, 0, 0, launchrt.ReasonCompleted},
		{"launcher failed", launchrt.Exit{Code: 12}, true, 0, 12, launchrt.ReasonError},
		{"QEMU OOM-killed, launcher exited on its own", launchrt.Exit{Code: 13}, true, 1, 13, launchrt.ReasonOOMKilled},
		{"the container's process OOM-killed", launchrt.Exit{Code: 137}, true, 1, 137, launchrt.ReasonOOMKilled},
		{"SIGKILL without OOM", launchrt.Exit{Code: 137}, true, 0, 137, launchrt.ReasonError},
		{"podman failed before the container ran", launchrt.Exit{Code: 125}, false, 0, 128, launchrt.ReasonStartError},
		{"entrypoint not found", launchrt.Exit{Code: 127}, false, 0, 128, launchrt.ReasonStartError},
		{"the launcher itself exited 125", launchrt.Exit{Code: 125}, true, 0, 125, launchrt.ReasonError},
		{"client killed", launchrt.Exit{Code: 137, Signal: syscall.SIGKILL}, true, 0, 137, launchrt.ReasonError},
		{"client not waited for", launchrt.Exit{Code: -1}, true, 0, 128, launchrt.ReasonError},
	}
	for _, c := range cases {
		got := podmanExit(c.exit, c.started, c.oomKills)
		if got.Code != c.code || got.Reason != c.reason {
			t.Errorf("%s: got %d/%s (%s), want %d/%s", c.name, got.Code, got.Reason, got.Message, c.code, c.reason)
		}
	}
}

// fakePodman writes a podman stand-in: "run" prints an event line and
// waits for a TERM the way `podman run --init` passes it on; "kill"
// signals the waiting "run" through a file; "container inspect" names a
// cgroup under root whose counter says one OOM kill.
func fakePodman(t *testing.T, root string) string {
	t.Helper()
	cg := filepath.Join(root, "memory", "fake")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, "memory.oom_control"), []byte("oom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(root, "calls")
	script := `#!/bin/sh
echo "$*" >> ` + calls + `
case "$1" in
run) echo '{"version":1,"event":"Scheduled"}'; trap 'echo "{\"version\":1,\"event\":\"Succeeded\"}"; exit 0' TERM
     echo $$ > ` + root + `/run.pid; while :; do sleep 0.05; done ;;
kill) [ -f ` + root + `/run.pid ] || { echo "Error: no such container $4" >&2; exit 125; }
     kill -$3 $(cat ` + root + `/run.pid) ;;
container) echo /fake ;;
esac
`
	p := filepath.Join(root, "podman")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPodmanStartStop(t *testing.T) {
	root := t.TempDir()
	r := &Podman{Path: fakePodman(t, root), CgroupRoot: root, Poll: 10 * time.Millisecond}
	lines := make(chan string, 10)
	out := spawn.NewLineWriter(launcherapi.NewFollower(func(ev launcherapi.Event) { lines <- ev.Event }, nil).Line)
	c, err := r.Start(context.Background(), launchrt.Spec{Pod: launchrt.Pod{Namespace: "ns", Name: "p", UID: "u", Image: "img"},
		Dir: root, StderrFile: filepath.Join(root, "stderr"), Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-lines; !strings.Contains(got, "Scheduled") {
		t.Fatalf("first line %q", got)
	}
	if c.ID() != "k8s_compute_p_ns_u_0" {
		t.Errorf("ID %s", c.ID())
	}
	// Wait until the OOM follower has read the counter (a real cgroup
	// goes with its container).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c.(*podmanContainer).oomKills() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the OOM counter was not read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	killed, err := c.Stop(context.Background(), 10*time.Second)
	if err != nil || killed {
		t.Fatalf("Stop: killed %v, %v", killed, err)
	}
	<-c.Done()
	if e := c.Exit(); e.Code != 0 || e.Reason != launchrt.ReasonOOMKilled {
		t.Errorf("exit %+v, want 0 and OOMKilled (the counter said 1)", e)
	}
	data, _ := os.ReadFile(filepath.Join(root, "calls"))
	calls := strings.Split(strings.TrimSpace(string(data)), "\n")
	if !slices.ContainsFunc(calls, func(s string) bool { return s == "kill --signal TERM k8s_compute_p_ns_u_0" }) {
		t.Errorf("no SIGTERM through podman kill; calls:\n%s", data)
	}
	if slices.ContainsFunc(calls, func(s string) bool { return strings.Contains(s, "KILL") }) {
		t.Errorf("SIGKILL sent to a container that stopped on SIGTERM; calls:\n%s", data)
	}
}
