package nodeagent

import (
	"strconv"
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

func launcherPod(command ...string) *k8sv1.Pod {
	return &k8sv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm-abcde", Namespace: "default"},
		Spec: k8sv1.PodSpec{
			InitContainers: []k8sv1.Container{{Name: "container-disk-binary", Image: "launcher"}},
			Containers: []k8sv1.Container{
				{Name: "compute", Image: "launcher", Command: command},
				{Name: "volumecontainerdisk", Image: "disk"},
			},
		},
	}
}

func TestParseLaunchArgs(t *testing.T) {
	kubevirt := []string{"/usr/bin/virt-launcher-monitor", "--qemu-timeout", "283s", "--name", "vm", "--uid", "u",
		"--grace-period-seconds", "45", "--hook-sidecars", "0", "--allow-emulation"}
	la, err := parseLaunchArgs(launcherPod(kubevirt...))
	if err != nil {
		t.Fatal(err)
	}
	if la.SimulateCrash || la.QEMUTimeout != 283*time.Second || la.GracePeriod != 45*time.Second {
		t.Fatalf("got %+v", la)
	}
	la, err = parseLaunchArgs(launcherPod(append(kubevirt, "--simulate-crash")...))
	if err != nil || !la.SimulateCrash {
		t.Fatalf("--simulate-crash not seen: %+v, %v", la, err)
	}

	bad := map[string][]string{
		"--qemu-timeout has no value":                {"x", "--qemu-timeout"},
		`--qemu-timeout "soon"`:                      {"x", "--qemu-timeout", "soon"},
		`--grace-period-seconds "-1" is not a whole`: {"x", "--grace-period-seconds", "-1"},
	}
	for want, cmd := range bad {
		if _, err := parseLaunchArgs(launcherPod(cmd...)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: got %v, want an error containing %q", cmd, err, want)
		}
	}
	pod := launcherPod()
	pod.Spec.Containers = pod.Spec.Containers[1:]
	if _, err := parseLaunchArgs(pod); err == nil || !strings.Contains(err.Error(), `no "compute" container`) {
		t.Errorf("pod without compute: %v", err)
	}
}

func TestPodStatus(t *testing.T) {
	pod := launcherPod("virt-launcher")
	start := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	st := podStatus(pod, snapshot{StartedAt: start}, "127.0.0.1")
	if st.Phase != k8sv1.PodRunning || computeState(st) != "running" || len(st.InitContainerStatuses) != 1 {
		t.Fatalf("running: %+v", st)
	}
	for _, cs := range st.ContainerStatuses {
		if !cs.Ready || cs.State.Running == nil {
			t.Errorf("container %s not running and ready: %+v", cs.Name, cs)
		}
	}
	for code, phase := range map[int]k8sv1.PodPhase{0: k8sv1.PodSucceeded, 2: k8sv1.PodFailed, 137: k8sv1.PodFailed} {
		st := podStatus(pod, snapshot{StartedAt: start, Exited: true, ExitCode: code, EndedAt: start.Add(time.Second)}, "127.0.0.1")
		if st.Phase != phase {
			t.Errorf("exit %d: phase %s, want %s", code, st.Phase, phase)
		}
		if got := computeState(st); got != "terminated("+strconv.Itoa(code)+")" {
			t.Errorf("exit %d: compute %s", code, got)
		}
		for _, c := range st.Conditions {
			if c.Type == k8sv1.PodReady && c.Status != k8sv1.ConditionFalse {
				t.Errorf("exit %d: pod still Ready", code)
			}
		}
	}
}

func TestVMITransition(t *testing.T) {
	failed := &launcherapi.Event{Event: launcherapi.EventFailed, Reason: launcherapi.ReasonQemuFailed, Message: "no kernel"}
	succeeded := &launcherapi.Event{Event: launcherapi.EventSucceeded, Reason: launcherapi.ReasonGuestShutdown}
	cases := []struct {
		name  string
		phase v1.VirtualMachineInstancePhase
		s     snapshot
		want  v1.VirtualMachineInstancePhase
	}{
		{"scheduling is virt-controller's", v1.Scheduling, snapshot{Exited: true, ExitCode: 2}, ""},
		{"scheduled, launcher booting", v1.Scheduled, snapshot{Launched: true}, ""},
		{"scheduled, domain running", v1.Scheduled, snapshot{Launched: true, Running: true}, v1.Running},
		{"running stays running", v1.Running, snapshot{Launched: true, Running: true}, ""},
		{"failed before running", v1.Scheduled, snapshot{Final: failed}, v1.Failed},
		{"guest powered off", v1.Running, snapshot{Running: true, Final: succeeded}, v1.Succeeded},
		{"launcher crashed without a final event", v1.Running, snapshot{Running: true, Exited: true, ExitCode: 2}, v1.Failed},
		{"final phases never change", v1.Failed, snapshot{Final: succeeded}, ""},
	}
	for _, c := range cases {
		got, _ := vmiTransition(c.phase, c.s)
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestSetPhaseKeepsTimestampsAndReady(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	setPhase(vmi, v1.Running, t0)
	setPhase(vmi, v1.Failed, t0.Add(time.Second))
	if len(vmi.Status.PhaseTransitionTimestamps) != 2 || vmi.Status.PhaseTransitionTimestamps[0].Phase != v1.Running {
		t.Fatalf("timestamps: %+v", vmi.Status.PhaseTransitionTimestamps)
	}
	if len(vmi.Status.Conditions) != 1 || vmi.Status.Conditions[0].Status != k8sv1.ConditionFalse {
		t.Fatalf("Ready condition: %+v", vmi.Status.Conditions)
	}
}

func TestHeartbeatStampParsesAsKubeVirtReadsIt(t *testing.T) {
	now := time.Date(2026, 11, 30, 6, 1, 2, 0, time.UTC)
	var ts metav1.Time
	if err := ts.UnmarshalJSON([]byte(`"` + heartbeatStamp(now) + `"`)); err != nil || !ts.Time.Equal(now) {
		t.Fatalf("stamp %q read back as %v, %v", heartbeatStamp(now), ts, err)
	}
}

func TestPodStatusOOMKilled(t *testing.T) {
	pod := launcherPod("virt-launcher")
	start := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	s := snapshot{StartedAt: start, Launched: true, Running: true, Exited: true, ExitCode: 13, Reason: launchrt.ReasonOOMKilled,
		Message: "oom", EndedAt: start.Add(time.Second)}
	st := podStatus(pod, s, "127.0.0.1")
	if st.Phase != k8sv1.PodFailed || computeState(st) != "terminated(13, OOMKilled)" {
		t.Fatalf("phase %s, compute %s", st.Phase, computeState(st))
	}
	for _, cs := range st.ContainerStatuses {
		if cs.Name == computeContainer && (cs.State.Terminated.Reason != launchrt.ReasonOOMKilled || cs.State.Terminated.Message != "oom") {
			t.Errorf("compute terminated %+v", cs.State.Terminated)
		}
	}
	s.Final = &launcherapi.Event{Event: launcherapi.EventFailed, Reason: launcherapi.ReasonVMCrashed}
	if phase, reason := finalPhase(s); phase != v1.Failed || !strings.Contains(reason, "VMCrashed (compute container OOMKilled)") {
		t.Errorf("final phase %s, %q", phase, reason)
	}
}

func TestLauncherManifestLeavesLimitsToTheCgroup(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default"}}
	vmi.Spec.Domain.Resources = v1.ResourceRequirements{
		Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("64Mi"), k8sv1.ResourceCPU: resource.MustParse("1")},
	}
	data, err := launcherManifest(vmi)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "limits") || !strings.Contains(string(data), `"requests"`) {
		t.Errorf("manifest:\n%s", data)
	}
	if _, ok := vmi.Spec.Domain.Resources.Limits[k8sv1.ResourceMemory]; !ok {
		t.Error("the cached VMI was changed")
	}
}
