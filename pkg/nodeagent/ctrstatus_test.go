package nodeagent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

// kubeletLauncherPod is a KubeVirt v1.6.0 launcher pod's containers, as
// virt-controller makes them for a containerDisk VMI with kernel boot.
func kubeletLauncherPod() *k8sv1.Pod {
	always := k8sv1.ContainerRestartPolicyAlways
	return &k8sv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm-abcde", Namespace: "default", UID: "u1"},
		Spec: k8sv1.PodSpec{
			InitContainers: []k8sv1.Container{
				{Name: "container-disk-binary", Image: "launcher"},
				{Name: "volumedisk-init", Image: "guest"},
				{Name: "volumekernel-boot-volume-init", Image: "guest"},
				{Name: "guest-console-log", Image: "launcher", RestartPolicy: &always},
			},
			Containers: []k8sv1.Container{
				{Name: "compute", Image: "launcher"},
				{Name: "volumedisk", Image: "guest"},
				{Name: "volumekernel-boot-volume", Image: "guest"},
			},
		},
	}
}

var t0 = time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)

// ran is the record of a container that ran from second from to second
// to of t0 and exited code.
func ran(name string, from, to, code int) runtimeState {
	return runtimeState{Name: name, ID: "id-" + name, ImageID: "img", Status: "exited", ExitCode: code,
		StartedAt: t0.Add(time.Duration(from) * time.Second), FinishedAt: t0.Add(time.Duration(to) * time.Second)}
}

// runs is the record of a container running since second from of t0.
func runs(name string, from int) runtimeState {
	return runtimeState{Name: name, ID: "id-" + name, ImageID: "img", Status: "running", StartedAt: t0.Add(time.Duration(from) * time.Second), CgroupPath: "/x/" + name}
}

func records(rs ...runtimeState) map[string]runtimeState {
	m := map[string]runtimeState{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

// statesOf is every container's state in a word, by name.
func statesOf(st k8sv1.PodStatus) map[string]string {
	m := map[string]string{}
	for _, cs := range append(append([]k8sv1.ContainerStatus(nil), st.InitContainerStatuses...), st.ContainerStatuses...) {
		m[cs.Name] = fmt.Sprintf("%s ready=%v", containerState(cs), cs.Ready)
	}
	return m
}

func conditionsOf(st k8sv1.PodStatus) string {
	var out []string
	for _, c := range st.Conditions {
		out = append(out, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	return strings.Join(out, " ")
}

func TestKubeletStatusesFromTheRuntime(t *testing.T) {
	inits := []runtimeState{ran("container-disk-binary", 0, 1, 0), ran("volumedisk-init", 1, 2, 0), ran("volumekernel-boot-volume-init", 2, 3, 0)}
	allRunning := append(append([]runtimeState(nil), inits...), runs("guest-console-log", 4), runs("compute", 4), runs("volumedisk", 4), runs("volumekernel-boot-volume", 4))
	failFast := append(append([]runtimeState(nil), inits...), runs("guest-console-log", 4), ran("compute", 4, 4, 2),
		runtimeState{Name: "volumedisk", ID: "id-volumedisk", Status: "created"})
	volumeEnded := append(append([]runtimeState(nil), allRunning[:6]...), ran("volumedisk", 4, 9, 1))
	oom := append(append([]runtimeState(nil), allRunning[:4]...), ran("compute", 4, 9, 137), runs("volumedisk", 4), runs("volumekernel-boot-volume", 4))
	oom[4].OOMKills = 1
	cases := []struct {
		name       string
		s          snapshot
		phase      k8sv1.PodPhase
		states     map[string]string
		conditions string
	}{
		{"before the init containers ran", snapshot{}, k8sv1.PodPending, map[string]string{
			"container-disk-binary": "waiting(PodInitializing) ready=false", "guest-console-log": "waiting(PodInitializing) ready=false",
			"compute": "waiting(PodInitializing) ready=false", "volumedisk": "waiting(PodInitializing) ready=false",
		}, "Initialized=False ContainersReady=False Ready=False"},
		{"the first init container done", snapshot{Containers: records(inits[0])}, k8sv1.PodPending, map[string]string{
			"container-disk-binary": "terminated(0) ready=true", "volumedisk-init": "waiting(PodInitializing) ready=false",
		}, "Initialized=False ContainersReady=False Ready=False"},
		{"an init container failed", snapshot{Exited: true, ExitCode: 128, Reason: "StartError", Message: "init container volumedisk-init: exit status 1",
			Containers: records(inits[0], ran("volumedisk-init", 1, 2, 1))}, k8sv1.PodFailed, map[string]string{
			"container-disk-binary": "terminated(0) ready=true", "volumedisk-init": "terminated(1) ready=false",
			"volumekernel-boot-volume-init": "waiting(PodInitializing) ready=false", "compute": "terminated(128) ready=false",
		}, "Initialized=False ContainersReady=False Ready=False"},
		{"init containers done, sidecar and containers running", snapshot{Launched: true, Running: true, Containers: records(allRunning...)}, k8sv1.PodRunning, map[string]string{
			"container-disk-binary": "terminated(0) ready=true", "volumekernel-boot-volume-init": "terminated(0) ready=true",
			"guest-console-log": "running ready=true", "compute": "running ready=true", "volumedisk": "running ready=true", "volumekernel-boot-volume": "running ready=true",
		}, "Initialized=True ContainersReady=True Ready=True"},
		{"compute ended first (fail-fast)", snapshot{Launched: true, Exited: true, ExitCode: 2, Containers: records(failFast...)}, k8sv1.PodFailed, map[string]string{
			"guest-console-log": "running ready=true", "compute": "terminated(2) ready=false",
			"volumedisk": "waiting() ready=false", "volumekernel-boot-volume": "waiting(PodInitializing) ready=false",
		}, "Initialized=True ContainersReady=False Ready=False"},
		{"a volume container ended on its own", snapshot{Launched: true, Running: true, Containers: records(volumeEnded...)}, k8sv1.PodRunning, map[string]string{
			"compute": "running ready=true", "volumedisk": "terminated(1) ready=false", "volumekernel-boot-volume": "waiting(PodInitializing) ready=false",
		}, "Initialized=True ContainersReady=False Ready=False"},
		{"compute OOM-killed", snapshot{Launched: true, Running: true, Exited: true, ExitCode: 137, Containers: records(oom...)}, k8sv1.PodFailed, map[string]string{
			"compute": "terminated(137, OOMKilled) ready=false", "volumedisk": "running ready=true",
		}, "Initialized=True ContainersReady=False Ready=False"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.s.Containers == nil {
				c.s.Containers = map[string]runtimeState{}
			}
			c.s.StartedAt, c.s.EndedAt = t0, t0.Add(10*time.Second)
			st := podStatus(kubeletLauncherPod(), c.s, "127.0.0.1")
			if st.Phase != c.phase {
				t.Errorf("phase %s, want %s", st.Phase, c.phase)
			}
			got := statesOf(st)
			for name, want := range c.states {
				if got[name] != want {
					t.Errorf("%s: %s, want %s", name, got[name], want)
				}
			}
			if got := conditionsOf(st); got != c.conditions {
				t.Errorf("conditions %s, want %s", got, c.conditions)
			}
		})
	}
}

func TestKubeletStatusFieldsAreKubelets(t *testing.T) {
	pod := kubeletLauncherPod()
	recs := records(ran("container-disk-binary", 0, 1, 0), ran("volumedisk-init", 1, 2, 0), ran("volumekernel-boot-volume-init", 2, 3, 0),
		runs("guest-console-log", 4), ran("compute", 4, 6, 2), runs("volumedisk", 4), runs("volumekernel-boot-volume", 5))
	st := podStatus(pod, snapshot{Launched: true, Exited: true, ExitCode: 2, StartedAt: t0, EndedAt: t0.Add(7 * time.Second), Containers: recs}, "127.0.0.1")
	var names []string
	for _, cs := range st.InitContainerStatuses {
		names = append(names, cs.Name)
	}
	if got := strings.Join(names, " "); got != "container-disk-binary volumedisk-init volumekernel-boot-volume-init guest-console-log" {
		t.Errorf("init container statuses in %q, want the spec's order with the sidecar among them", got)
	}
	names = nil
	for _, cs := range st.ContainerStatuses {
		names = append(names, cs.Name)
		if cs.Name != computeContainer {
			continue
		}
		term := cs.State.Terminated
		if term == nil || term.ExitCode != 2 || term.Reason != "Error" || term.ContainerID != "podman://id-compute" ||
			!term.StartedAt.Time.Equal(t0.Add(4*time.Second)) || !term.FinishedAt.Time.Equal(t0.Add(6*time.Second)) {
			t.Errorf("compute terminated %+v", term)
		}
		if cs.ContainerID != "podman://id-compute" || cs.Image != "launcher" || cs.ImageID != "sha256:img" || cs.RestartCount != 0 || cs.Ready || *cs.Started {
			t.Errorf("compute status %+v", cs)
		}
	}
	if got := strings.Join(names, " "); got != "compute volumedisk volumekernel-boot-volume" {
		t.Errorf("container statuses in %q, want sorted by name", got)
	}
	for _, cs := range st.ContainerStatuses {
		if cs.Name == "volumekernel-boot-volume" && (cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(t0.Add(5*time.Second)) || !*cs.Started) {
			t.Errorf("volumekernel-boot-volume: %+v, want running since its own start", cs)
		}
	}
	init := st.InitContainerStatuses[0].State.Terminated
	if init == nil || init.Reason != "Completed" || !init.FinishedAt.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("container-disk-binary terminated %+v", init)
	}
}

func TestParseInspectKeepsThePodsContainers(t *testing.T) {
	// The fields of podman 4.3's `podman container inspect` that are read.
	data := `[{"Id":"aaa","Image":"i1","Config":{"Labels":{"io.kubernetes.container.name":"POD"}},"State":{"Status":"running"}},
	 {"Id":"bbb","Image":"i2","Config":{"Labels":{"io.kubernetes.container.name":"compute"}},
	  "State":{"Status":"exited","ExitCode":137,"OOMKilled":true,"StartedAt":"2026-12-04T19:03:52.983587972Z","FinishedAt":"2026-12-04T19:03:53.123230036Z","CgroupPath":""}},
	 {"Id":"ccc","Image":"i3","Config":{"Labels":{"io.kubernetes.container.name":"volumedisk"}},
	  "State":{"Status":"running","StartedAt":"2026-12-04T19:03:53.949584116Z","FinishedAt":"0001-01-01T00:00:00Z","CgroupPath":"/libpod_parent/libpod-ccc"}},
	 {"Id":"ddd","Config":{"Labels":{}},"State":{"Status":"running"}}]`
	recs, err := parseInspect([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("records %+v, want compute and volumedisk only", recs)
	}
	c := recs["compute"]
	if c.ID != "bbb" || c.ImageID != "i2" || c.Status != "exited" || c.ExitCode != 137 || c.OOMKills != 1 || c.StartedAt.Nanosecond() != 983587972 {
		t.Errorf("compute %+v", c)
	}
	if v := recs["volumedisk"]; v.Status != "running" || v.CgroupPath != "/libpod_parent/libpod-ccc" {
		t.Errorf("volumedisk %+v", v)
	}
	if _, err := parseInspect([]byte("Error: no such container")); err == nil {
		t.Error("no error for output that is not podman's JSON")
	}
}

// fakeNodePodman is a Command for KubeletMode that answers `podman
// container inspect` with the JSON in file and every other podman command
// with nothing; inspect exits 125, as podman does when a name is unknown.
func fakeNodePodman(file string) func(argv ...string) []string {
	script := `if [ "$2" = inspect ]; then cat "$0"; exit 125; fi`
	return func(argv ...string) []string { return append([]string{"sh", "-c", script, file}, argv[1:]...) }
}

func writeInspect(t *testing.T, file string, recs ...runtimeState) {
	t.Helper()
	var out []map[string]any
	for _, r := range recs {
		out = append(out, map[string]any{"Id": r.ID, "Image": r.ImageID, "Config": map[string]any{"Labels": map[string]string{LabelContainerName: r.Name}},
			"State": map[string]any{"Status": r.Status, "ExitCode": r.ExitCode, "StartedAt": r.StartedAt, "FinishedAt": r.FinishedAt}})
	}
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKubeletPodReadsTheRuntimeAtEveryContainersEnd(t *testing.T) {
	file := filepath.Join(t.TempDir(), "inspect.json")
	notified := make(chan struct{}, 4)
	compute, volume := newFake(), newFake()
	k := &kubeletPod{mode: &KubeletMode{Command: fakeNodePodman(file)}, log: slog.Default(), names: []string{"k8s_POD", "k8s_compute", "k8s_volumedisk"},
		compute: compute, others: []launchrt.Launcher{volume}, states: newPodStates(), notify: func() { notified <- struct{}{} }, done: make(chan struct{})}
	writeInspect(t, file, runs("compute", 1), runs("volumedisk", 1))
	k.observe(t.Context())
	go k.watch()

	t.Log("a volume container ends on its own: its client's end reads podman's record and re-queues the pod")
	writeInspect(t, file, runs("compute", 1), ran("volumedisk", 1, 5, 1))
	volume.end(1)
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("the pod was not re-queued after a container's end")
	}
	if got := k.states.all()["volumedisk"]; got.Status != "exited" || got.ExitCode != 1 {
		t.Errorf("volumedisk %+v, want its own exit 1", got)
	}

	t.Log("compute ends: its record is read, then kept though the containers are removed")
	writeInspect(t, file, ran("compute", 1, 7, 2))
	compute.end(2)
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the pod did not end with compute")
	}
	writeInspect(t, file)
	k.observe(t.Context())
	all := k.states.all()
	if c := all["compute"]; c.Status != "exited" || c.ExitCode != 2 {
		t.Errorf("compute %+v, want exited 2", c)
	}
	if v := all["volumedisk"]; v.ExitCode != 1 {
		t.Errorf("volumedisk %+v, want its record kept", v)
	}
}

func TestPodStatesKeepRecordsAndFreeze(t *testing.T) {
	p := newPodStates()
	p.merge(records(runs("compute", 1), runs("volumedisk", 1)), t.TempDir())
	p.merge(records(ran("compute", 1, 2, 0)), t.TempDir())
	all := p.all()
	if all["volumedisk"].Status != "running" || all["compute"].Status != "exited" {
		t.Errorf("records %+v", all)
	}
	p.freeze()
	p.merge(records(ran("volumedisk", 1, 3, 137)), t.TempDir())
	if got := p.all()["volumedisk"]; got.Status != "running" {
		t.Errorf("a frozen record changed: %+v", got)
	}
}
