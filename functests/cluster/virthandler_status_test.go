package cluster_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/testguest"
)

// The test guest's launcher pod, as KubeVirt v1.6.0 makes it: its init
// containers in order, its native sidecar and its containers.
var (
	guestInits      = []string{"container-disk-binary", "volume" + testguest.Disk + "-init", "volumekernel-boot-volume-init"}
	guestSidecar    = "guest-console-log"
	guestContainers = []string{"compute", "volume" + testguest.Disk, "volumekernel-boot-volume"}
)

// podContainerIDs is podman's full ID of every container of the pod by its
// container name, as the host's podman lists them.
func podContainerIDs(uid types.UID) map[string]string { return podContainerList(uid, "{{.ID}}") }

// statusByName finds a container's status among the pod's init and
// regular container statuses; init says in which list it was.
func statusByName(st k8sv1.PodStatus, name string) (cs k8sv1.ContainerStatus, init, ok bool) {
	for _, c := range st.InitContainerStatuses {
		if c.Name == name {
			return c, true, true
		}
	}
	for _, c := range st.ContainerStatuses {
		if c.Name == name {
			return c, false, true
		}
	}
	return k8sv1.ContainerStatus{}, false, false
}

// condition is the status of the pod condition t ("" when absent).
func condition(st k8sv1.PodStatus, t k8sv1.PodConditionType) k8sv1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// expectInitsCompleted checks that each of the test guest's init
// containers is reported terminated with exit 0 and reason Completed,
// ready, with podman's ID of it (ids) and its own start and end, ended
// before compute started (when computeStart is set).
func expectInitsCompleted(st k8sv1.PodStatus, ids map[string]string, computeStart time.Time) {
	for _, name := range guestInits {
		cs, init, ok := statusByName(st, name)
		Expect(ok && init).To(BeTrue(), "init container %s among initContainerStatuses: %+v", name, st.InitContainerStatuses)
		t := cs.State.Terminated
		Expect(t).NotTo(BeNil(), "init container %s: %+v", name, cs.State)
		Expect(t.ExitCode).To(BeZero(), "init container %s", name)
		Expect(t.Reason).To(Equal("Completed"), "init container %s", name)
		Expect(cs.Ready).To(BeTrue(), "init container %s ready (terminated with 0)", name)
		Expect(cs.ContainerID).To(Equal("podman://"+ids[name]), "init container %s: podman's own container", name)
		Expect(t.ContainerID).To(Equal(cs.ContainerID), "init container %s", name)
		Expect(t.StartedAt.IsZero() || t.FinishedAt.Before(&t.StartedAt)).To(BeFalse(), "init container %s ran %v → %v", name, t.StartedAt, t.FinishedAt)
		if !computeStart.IsZero() {
			Expect(t.FinishedAt.Time.After(computeStart.Add(time.Second))).To(BeFalse(), "init container %s ended %v, after compute started %v", name, t.FinishedAt, computeStart)
		}
	}
}

// expectRunningPodStatuses checks a Running test-guest VMI's pod status
// as kubelet reports it from the runtime: the init containers terminated
// Completed with exit 0, the sidecar among the init containers running and
// ready, compute and the volume containers running and ready, each with
// podman's ID of it, the image and restart count 0; Initialized,
// ContainersReady and Ready true. It returns a line for the report.
func expectRunningPodStatuses(pod *k8sv1.Pod) string {
	st := pod.Status
	ids := podContainerIDs(pod.UID)
	Expect(st.Phase).To(Equal(k8sv1.PodRunning))
	compute, _, ok := statusByName(st, "compute")
	Expect(ok && compute.State.Running != nil).To(BeTrue(), "compute running: %+v", compute)
	expectInitsCompleted(st, ids, compute.State.Running.StartedAt.Time)
	for _, name := range append([]string{guestSidecar}, guestContainers...) {
		cs, init, ok := statusByName(st, name)
		Expect(ok).To(BeTrue(), "a status of %s", name)
		Expect(init).To(Equal(name == guestSidecar), "%s among initContainerStatuses (the native sidecar, as kubelet 1.33 reports it) or containerStatuses", name)
		Expect(cs.State.Running).NotTo(BeNil(), "%s running: %+v", name, cs.State)
		Expect(cs.State.Running.StartedAt.IsZero()).To(BeFalse(), "%s startedAt", name)
		Expect(cs.Ready).To(BeTrue(), "%s ready", name)
		Expect(cs.Started).To(HaveValue(BeTrue()), "%s started", name)
		Expect(cs.ContainerID).To(Equal("podman://"+ids[name]), "%s: podman's own container", name)
		Expect(cs.Image).NotTo(BeEmpty(), "%s image", name)
		Expect(cs.ImageID).To(HavePrefix("sha256:"), "%s imageID", name)
		Expect(cs.RestartCount).To(BeZero(), "%s", name)
	}
	for _, c := range []k8sv1.PodConditionType{k8sv1.PodInitialized, k8sv1.ContainersReady, k8sv1.PodReady} {
		Expect(condition(st, c)).To(Equal(k8sv1.ConditionTrue), "condition %s: %+v", c, st.Conditions)
	}
	var parts []string
	for _, list := range [][]k8sv1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, cs := range list {
			parts = append(parts, cs.Name+" "+stateWord(cs))
		}
	}
	return strings.Join(parts, ", ")
}

// stateWord is a container's state in a word for reports.
func stateWord(cs k8sv1.ContainerStatus) string {
	switch s := cs.State; {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%d %s)", s.Terminated.ExitCode, s.Terminated.Reason)
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ")"
	}
	return "none"
}

// expectFailFastPodStatuses checks the status of a fail-fast launcher
// pod as it went Failed: compute terminated with exit 2 and reason Error
// from its own podman container; every other container reported in its
// own state (running or terminated with podman's record of it, or waiting
// with no container yet), never copied from compute's. It returns a line
// for the report.
func expectFailFastPodStatuses(pod *k8sv1.Pod) string {
	st := pod.Status
	Expect(st.Phase).To(Equal(k8sv1.PodFailed))
	compute, _, ok := statusByName(st, "compute")
	Expect(ok && compute.State.Terminated != nil).To(BeTrue(), "compute terminated: %+v", compute)
	t := compute.State.Terminated
	Expect(t.ExitCode).To(BeEquivalentTo(2), "the fail-fast launcher's exit code")
	Expect(t.Reason).To(Equal("Error"))
	Expect(compute.ContainerID).To(MatchRegexp(`^podman://[0-9a-f]{64}$`), "compute's own podman container")
	Expect(t.StartedAt.IsZero()).To(BeFalse(), "compute's startedAt")
	Expect(compute.Ready).To(BeFalse())
	Expect(condition(st, k8sv1.ContainersReady)).To(Equal(k8sv1.ConditionFalse))
	Expect(condition(st, k8sv1.PodReady)).To(Equal(k8sv1.ConditionFalse))
	for _, name := range guestInits {
		cs, _, _ := statusByName(st, name)
		Expect(cs.State.Terminated).NotTo(BeNil(), "init container %s ran before compute: %+v", name, cs.State)
		Expect(cs.State.Terminated.ExitCode).To(BeZero(), "init container %s", name)
		Expect(cs.State.Terminated.Reason).To(Equal("Completed"), "init container %s", name)
		Expect(cs.ContainerID).To(MatchRegexp(`^podman://[0-9a-f]{64}$`), "init container %s: its own podman container", name)
	}
	seen := map[string]bool{compute.ContainerID: true}
	for _, name := range append([]string{guestSidecar}, guestContainers[1:]...) {
		cs, _, ok := statusByName(st, name)
		Expect(ok).To(BeTrue(), "a status of %s", name)
		switch s := cs.State; {
		case s.Running != nil, s.Terminated != nil:
			Expect(cs.ContainerID).To(MatchRegexp(`^podman://[0-9a-f]{64}$`), "%s ran: its own podman container", name)
			Expect(seen[cs.ContainerID]).To(BeFalse(), "%s has another container's ID %s", name, cs.ContainerID)
			seen[cs.ContainerID] = true
			if s.Terminated != nil {
				Expect(s.Terminated.ContainerID).To(Equal(cs.ContainerID), "%s", name)
			}
		case s.Waiting != nil:
			Expect(cs.ContainerID).To(BeEmpty(), "%s waiting", name)
		default:
			Fail(fmt.Sprintf("%s has no state: %+v", name, cs))
		}
	}
	var parts []string
	for _, list := range [][]k8sv1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, cs := range list {
			parts = append(parts, cs.Name+" "+stateWord(cs))
		}
	}
	return strings.Join(parts, ", ")
}

// watchFailedPod creates a fail-fast test-guest VMI and returns its
// launcher pod as it was when reported Failed, seen through a watch (the
// pod may be deleted soon after), and the VMI.
func watchFailedPod(ctx SpecContext, kc kubecli.KubevirtClient, name string) (*k8sv1.Pod, *v1.VirtualMachineInstance) {
	vmi := testguest.VMI(testguest.Spec{Name: name, Namespace: namespace(), Annotations: map[string]string{failFast: ""}})
	noPodNet := false
	vmi.Spec.Domain.Devices.AutoattachPodInterface = &noPodNet
	vmi, err := kc.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	w, err := kc.CoreV1().Pods(namespace()).Watch(ctx, metav1.ListOptions{LabelSelector: v1.CreatedByLabel + "=" + string(vmi.UID)})
	Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			Expect(ok).To(BeTrue(), "the pod watch of VMI %s ended", name)
			if pod, isPod := ev.Object.(*k8sv1.Pod); isPod && ev.Type != watch.Deleted && pod.Status.Phase == k8sv1.PodFailed {
				return pod, vmi
			}
		case <-deadline:
			Fail(fmt.Sprintf("no Failed launcher pod of fail-fast VMI %s within 2 minutes", name))
		}
	}
}
