package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/memcg"
)

// runtimeState is the runtime's (podman's) record of one container of a
// pod, as `podman container inspect` reports it: what kubelet's status
// of that container is made from.
type runtimeState struct {
	// Name is the pod's name for the container (its
	// io.kubernetes.container.name label).
	Name string
	// ID and ImageID are podman's container and image IDs.
	ID, ImageID string
	// Status is podman's: created, running, exited, stopped, ...
	Status   string
	ExitCode int
	// OOMKills is how often the kernel's OOM killer struck in the
	// container's memory cgroup, or 1 when podman says OOMKilled.
	OOMKills              int
	StartedAt, FinishedAt time.Time
	// CgroupPath is the container's cgroup while it runs.
	CgroupPath string
}

// ContainerIDPrefix is the type part of the container IDs in the pod
// statuses of kubelet mode: kubelet writes `<runtime name>://<ID>`
// (containerd://, cri-o://), and the runtime here is podman.
const ContainerIDPrefix = "podman://"

// parseInspect reads the JSON array `podman container inspect` prints
// into records by the pod's container names; the pod's sandbox (POD) and
// containers without the label are left out.
func parseInspect(data []byte) (map[string]runtimeState, error) {
	var raw []struct {
		ID     string `json:"Id"`
		Image  string `json:"Image"`
		Config struct {
			Labels map[string]string `json:"Labels"`
		} `json:"Config"`
		State struct {
			Status     string    `json:"Status"`
			ExitCode   int       `json:"ExitCode"`
			OOMKilled  bool      `json:"OOMKilled"`
			StartedAt  time.Time `json:"StartedAt"`
			FinishedAt time.Time `json:"FinishedAt"`
			CgroupPath string    `json:"CgroupPath"`
		} `json:"State"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("reading podman container inspect: %w", err)
	}
	out := map[string]runtimeState{}
	for _, r := range raw {
		name := r.Config.Labels[LabelContainerName]
		if name == "" || name == "POD" {
			continue
		}
		s := runtimeState{Name: name, ID: r.ID, ImageID: r.Image, Status: r.State.Status, ExitCode: r.State.ExitCode,
			StartedAt: r.State.StartedAt, FinishedAt: r.State.FinishedAt, CgroupPath: r.State.CgroupPath}
		if r.State.OOMKilled {
			s.OOMKills = 1
		}
		out[name] = s
	}
	return out, nil
}

// podStates is what the agent knows of the runtime's state of a pod's
// containers: the latest record of each (a container's record stays once
// podman no longer has it), and the OOM-kill counters of the running ones.
// Once frozen (the pod ended), reads no longer change it.
type podStates struct {
	mu      sync.Mutex
	byName  map[string]runtimeState
	oom     map[string]*memcg.Follower
	frozen  bool
	stopOOM context.CancelFunc
	oomCtx  context.Context
}

func newPodStates() *podStates {
	ctx, cancel := context.WithCancel(context.Background())
	return &podStates{byName: map[string]runtimeState{}, oom: map[string]*memcg.Follower{}, oomCtx: ctx, stopOOM: cancel}
}

// merge records fresh records, and starts following the OOM-kill counter
// of every container newly seen running (a follower reads one small file
// every 100 ms; the counter goes with the cgroup when the container
// ends, so it is read while the container runs).
func (p *podStates) merge(fresh map[string]runtimeState, cgroupRoot string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		return
	}
	for name, s := range fresh {
		if f := p.oom[name]; f != nil {
			_ = f.ReadNow() // an error: the cgroup is gone with the container
		} else if s.Status == "running" && s.CgroupPath != "" {
			p.oom[name] = memcg.Follow(p.oomCtx, memcg.CounterFile(cgroupRoot, s.CgroupPath), 100*time.Millisecond)
		}
		p.byName[name] = s
	}
}

// freeze keeps the records as they are from now on and stops the OOM
// followers.
func (p *podStates) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
	p.stopOOM()
}

// all is a copy of the records, each with the most OOM kills its
// follower read; never nil.
func (p *podStates) all() map[string]runtimeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]runtimeState, len(p.byName))
	for name, s := range p.byName {
		if f := p.oom[name]; f != nil {
			if n, _ := f.Most(); n > s.OOMKills {
				s.OOMKills = n
			}
		}
		out[name] = s
	}
	return out
}

// inspect reads podman's record of the named containers with one
// `podman container inspect` inside the node namespace. A name podman
// does not know (not created yet, or removed) is left out: podman then
// exits 125 but prints the others.
func (m *KubeletMode) inspect(ctx context.Context, names []string) (map[string]runtimeState, error) {
	c := m.Command(append([]string{"podman", "container", "inspect"}, names...)...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c[0], c[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("podman container inspect: %w", err)
	}
	if len(bytes.TrimSpace(stdout.Bytes())) == 0 {
		return nil, fmt.Errorf("podman container inspect: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseInspect(stdout.Bytes())
}

// kubeletContainerStatuses are kubelet's initContainerStatuses and
// containerStatuses of pod from the runtime's records (kubelet 1.33's
// convertToAPIContainerStatuses and the prober's readiness without
// probes): a container with a record is running (started, ready) or
// terminated with its own exit code, reason, times and ID; one without is
// waiting (PodInitializing: the pod has init containers). A native sidecar
// (an init container with restartPolicy Always, KubeVirt's
// guest-console-log) is among the init containers, ready while it runs.
// Compute without a record on a pod that ended has the agent's record of
// why (s: the start error, say). Init containers keep the spec's order,
// containers are sorted by name, as kubelet sorts them.
func kubeletContainerStatuses(pod *k8sv1.Pod, s snapshot) (inits, ctrs []k8sv1.ContainerStatus) {
	for _, ic := range pod.Spec.InitContainers {
		cs := runtimeStatus(ic, s.Containers[ic.Name])
		if isSidecar(ic) {
			cs.Ready = cs.State.Running != nil
		} else {
			cs.Ready = cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		}
		inits = append(inits, cs)
	}
	for _, ctr := range pod.Spec.Containers {
		rec, ok := s.Containers[ctr.Name]
		cs := runtimeStatus(ctr, rec)
		if ctr.Name == computeContainer && s.Exited && (!ok || rec.Status != "exited") {
			// No record of compute's end in the runtime (it never ran, or
			// its record went first): the agent's record of the pod's end.
			cs.State = k8sv1.ContainerState{Terminated: computeTerminated(s)}
			cs.Started = new(bool)
		}
		cs.Ready = cs.State.Running != nil
		ctrs = append(ctrs, cs)
	}
	sort.Slice(ctrs, func(i, j int) bool { return ctrs[i].Name < ctrs[j].Name })
	return inits, ctrs
}

// runtimeStatus is one container's status from its record (a zero record:
// none).
func runtimeStatus(ctr k8sv1.Container, rec runtimeState) k8sv1.ContainerStatus {
	cs := k8sv1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, Started: new(bool),
		State: k8sv1.ContainerState{Waiting: &k8sv1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	if rec.ID == "" {
		return cs
	}
	cs.ContainerID = ContainerIDPrefix + rec.ID
	if rec.ImageID != "" {
		cs.ImageID = "sha256:" + rec.ImageID
	}
	switch rec.Status {
	case "running":
		running := true
		cs.Started = &running
		cs.State = k8sv1.ContainerState{Running: &k8sv1.ContainerStateRunning{StartedAt: metav1.NewTime(rec.StartedAt)}}
	case "exited", "stopped":
		cs.State = k8sv1.ContainerState{Terminated: &k8sv1.ContainerStateTerminated{ExitCode: int32(rec.ExitCode),
			Reason: launchrt.ExitReason(rec.ExitCode, rec.OOMKills), StartedAt: metav1.NewTime(rec.StartedAt),
			FinishedAt: metav1.NewTime(rec.FinishedAt), ContainerID: cs.ContainerID}}
		if rec.OOMKills > 0 {
			cs.State.Terminated.Message = fmt.Sprintf("the kernel's OOM killer killed %d process(es) of the container; it exited %d", rec.OOMKills, rec.ExitCode)
		}
	default:
		// Created, not running yet: "waiting to be running", as kubelet.
		cs.State = k8sv1.ContainerState{Waiting: &k8sv1.ContainerStateWaiting{}}
	}
	return cs
}

// computeTerminated is compute's terminated state from the agent's record
// of its end (the podman run client's exit, or the start error).
func computeTerminated(s snapshot) *k8sv1.ContainerStateTerminated {
	reason := s.Reason
	if reason == "" {
		reason = launchrt.ExitReason(s.ExitCode, 0)
	}
	return &k8sv1.ContainerStateTerminated{ExitCode: int32(s.ExitCode), Reason: reason, Message: s.Message,
		StartedAt: metav1.NewTime(s.StartedAt), FinishedAt: metav1.NewTime(s.EndedAt)}
}

// isSidecar reports whether an init container is a native sidecar
// (restartPolicy Always): it runs beside the containers.
func isSidecar(ic k8sv1.Container) bool {
	return ic.RestartPolicy != nil && *ic.RestartPolicy == k8sv1.ContainerRestartPolicyAlways
}

// kubeletConditions are kubelet's Initialized (every init container
// terminated with 0, every sidecar started), ContainersReady and Ready
// (every container and sidecar ready) for the statuses.
func kubeletConditions(pod *k8sv1.Pod, inits, ctrs []k8sv1.ContainerStatus) (initialized, ready k8sv1.ConditionStatus) {
	initialized, ready = k8sv1.ConditionTrue, k8sv1.ConditionTrue
	for i, ic := range pod.Spec.InitContainers {
		cs := inits[i]
		if isSidecar(ic) {
			if cs.Started == nil || !*cs.Started {
				initialized = k8sv1.ConditionFalse
			}
			if !cs.Ready {
				ready = k8sv1.ConditionFalse
			}
		} else if !cs.Ready {
			initialized = k8sv1.ConditionFalse
		}
	}
	if anyStarted(ctrs) {
		// A regular container started: the pod initialized before (kubelet's rule).
		initialized = k8sv1.ConditionTrue
	}
	for _, cs := range ctrs {
		if !cs.Ready {
			ready = k8sv1.ConditionFalse
		}
	}
	return initialized, ready
}

// anyStarted reports whether any of the statuses shows a container that
// started (running or terminated).
func anyStarted(ctrs []k8sv1.ContainerStatus) bool {
	for _, cs := range ctrs {
		if cs.State.Running != nil || (cs.State.Terminated != nil && cs.ContainerID != "") {
			return true
		}
	}
	return false
}

// statusSummary is the state of every container in st, one word each, to
// tell whether a report changes anything.
func statusSummary(st k8sv1.PodStatus) string {
	var b strings.Builder
	for _, list := range [][]k8sv1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, cs := range list {
			fmt.Fprintf(&b, "%s=%s/%v ", cs.Name, containerState(cs), cs.Ready)
		}
	}
	return b.String()
}

// containerState is one container's state in a word: running,
// terminated(code) or terminated(code, OOMKilled), waiting(reason).
func containerState(cs k8sv1.ContainerStatus) string {
	switch {
	case cs.State.Terminated != nil && cs.State.Terminated.Reason == launchrt.ReasonOOMKilled:
		return fmt.Sprintf("terminated(%d, %s)", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
	case cs.State.Terminated != nil:
		return fmt.Sprintf("terminated(%d)", cs.State.Terminated.ExitCode)
	case cs.State.Running != nil:
		return "running"
	case cs.State.Waiting != nil:
		return "waiting(" + cs.State.Waiting.Reason + ")"
	}
	return "waiting"
}
