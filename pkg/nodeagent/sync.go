package nodeagent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

// syncPod is the kubelet's part for one virt-launcher pod.
func (a *Agent) syncPod(ctx context.Context, key string) error {
	obj, exists, err := a.pods.GetStore().GetByKey(key)
	if err != nil {
		return fmt.Errorf("reading pod %s from cache: %w", key, err)
	}
	if !exists {
		return nil
	}
	pod := obj.(*k8sv1.Pod)
	if pod.Spec.NodeName != a.cfg.NodeName {
		return nil
	}
	c := a.containerOfPod(pod.UID)
	if c == nil {
		if pod.Status.Phase == k8sv1.PodSucceeded || pod.Status.Phase == k8sv1.PodFailed {
			// Ended before this agent started (or was restarted): only the
			// final deletion is left to do.
			if pod.DeletionTimestamp != nil {
				return a.deletePod(ctx, pod)
			}
			return nil
		}
		if pod.DeletionTimestamp != nil {
			return a.deletePod(ctx, pod)
		}
		vmiKey, vmiUID, err := vmiRef(pod)
		if err != nil {
			return err
		}
		var vmi *v1.VirtualMachineInstance
		if a.cfg.Kubelet == nil { // virt-handler's part reads the VMI
			if vmi, err = a.vmiOf(ctx, pod, vmiKey, vmiUID); err != nil {
				return err
			}
		}
		args, err := parseLaunchArgs(pod)
		if err != nil {
			return a.failPod(ctx, pod, err, nil)
		}
		image, res, err := computeResources(pod)
		if err != nil {
			return a.failPod(ctx, pod, err, nil)
		}
		var layout *podLayout
		if a.cfg.KubeVirt != nil {
			l, err := kubevirtLayout(pod)
			if err != nil {
				return a.failPod(ctx, pod, err, nil)
			}
			layout = &l
		}
		c = a.newContainer(pod, vmiKey, vmiUID, args, image, res, layout)
		if a.cfg.Kubelet != nil {
			// kubelet starts a bound pod at once; virt-handler takes the
			// VMI from there.
			progress := func(podIP netip.Addr) { a.reportStarting(ctx, c, podIP) }
			if err := c.launchKubelet(ctx, &a.cfg, a.procs, a.notifier(c), progress); err != nil {
				return a.failPod(ctx, a.latest(key, pod), err, c)
			}
			pod = a.latest(key, pod) // progress reported it meanwhile
		} else if args.SimulateCrash {
			// KubeVirt's launcher crashes as soon as its container starts.
			if err := a.launch(ctx, c, vmi); err != nil {
				return a.failPod(ctx, pod, err, nil)
			}
		}
	}
	if pod.DeletionTimestamp != nil {
		grace := 30 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		c.stop(a.cfg.Logger, graceOr(grace, 30*time.Second))
		if !c.snapshot().Exited {
			return nil // the exit re-queues the pod
		}
		// virt-handler reports the VMI's end before the pod goes, so that
		// virt-controller does not fail a VMI whose pod vanished.
		if err := a.syncVMIOf(ctx, c); err != nil {
			return err
		}
		if err := a.reportPod(ctx, pod, c.snapshot()); err != nil {
			return err
		}
		if err := a.deletePod(ctx, pod); err != nil {
			return err
		}
		a.forget(c)
		if a.cfg.Kubelet != nil {
			a.cfg.Kubelet.removePodDir(pod.UID, a.cfg.Logger)
		}
		return nil
	}
	if s := c.snapshot(); a.cfg.Kubelet != nil && s.Launched && !s.Running && !s.Exited {
		return nil // compute ended before it was seen running; its exit re-queues the pod
	}
	return a.reportPod(ctx, pod, c.snapshot())
}

// syncBind plays the scheduler for one launcher pod that no node has:
// every pending one goes to this node.
func (a *Agent) syncBind(ctx context.Context, key string) error {
	obj, exists, err := a.unbound.GetStore().GetByKey(key)
	if err != nil {
		return fmt.Errorf("reading unbound pod %s from cache: %w", key, err)
	}
	if !exists {
		return nil // bound meanwhile (the node's watch has it now), or gone
	}
	pod := obj.(*k8sv1.Pod)
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || pod.Status.Phase != k8sv1.PodPending {
		return nil
	}
	return a.bind(ctx, pod)
}

// bind binds pod to this node with the scheduler's client.
func (a *Agent) bind(ctx context.Context, pod *k8sv1.Pod) error {
	err := a.cfg.Scheduler.CoreV1().Pods(pod.Namespace).Bind(ctx, &k8sv1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     k8sv1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName},
	}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // bound meanwhile, or gone
	}
	if err != nil {
		return fmt.Errorf("binding pod %s/%s to %s: %w", pod.Namespace, pod.Name, a.cfg.NodeName, err)
	}
	a.cfg.Logger.Info("pod bound", "pod", pod.Namespace+"/"+pod.Name)
	return nil
}

// deletePod finishes a graceful deletion, as the kubelet does once the
// pod's containers are gone.
func (a *Agent) deletePod(ctx context.Context, pod *k8sv1.Pod) error {
	zero := int64(0)
	err := a.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// failPod reports a pod whose container could not be started; c, when
// not nil, is the pod's container, whose runtime records (kubelet-only
// mode) give the containers that ran (a failed init container) their
// own statuses.
func (a *Agent) failPod(ctx context.Context, pod *k8sv1.Pod, cause error, c *container) error {
	a.cfg.Logger.Error("cannot start the launcher", "pod", pod.Namespace+"/"+pod.Name, "err", cause)
	s := snapshot{StartedAt: time.Now(), Exited: true, ExitCode: 128, Reason: launchrt.ReasonStartError, Message: cause.Error(), EndedAt: time.Now()}
	if c != nil && c.states != nil {
		s.StartedAt, s.Containers = c.startedAt, c.states.all()
	}
	return a.reportPod(ctx, pod, s)
}

// cached is the cache's copy of the pod at key, when it is the pod with
// that UID.
func (a *Agent) cached(key string, uid types.UID) (*k8sv1.Pod, bool) {
	obj, ok, err := a.pods.GetStore().GetByKey(key)
	if err != nil || !ok || obj.(*k8sv1.Pod).UID != uid {
		return nil, false
	}
	return obj.(*k8sv1.Pod), true
}

// latest is the cache's copy of the pod at key if it is still pod (the
// same UID), else pod.
func (a *Agent) latest(key string, pod *k8sv1.Pod) *k8sv1.Pod {
	if p, ok := a.cached(key, pod.UID); ok {
		return p
	}
	return pod
}

// reportStarting reports a pod while kubelet starts it (its init
// containers run): Pending, each container as the runtime shows it. The
// worker starting the pod holds its container, so the pod is read from
// the cache; a report that loses a race is followed by the next.
func (a *Agent) reportStarting(ctx context.Context, c *container, podIP netip.Addr) {
	pod, ok := a.cached(c.podKey.String(), c.podUID)
	if !ok || pod.DeletionTimestamp != nil {
		return
	}
	s := snapshot{StartedAt: c.startedAt, Containers: c.states.all()}
	if podIP.IsValid() {
		s.PodIP = podIP.String()
	}
	if err := a.reportPod(ctx, pod, s); err != nil {
		a.cfg.Logger.Debug("reporting a starting pod", "pod", c.podKey.String(), "err", err)
	}
}

// podStatus is the status the kubelet would report for pod with its
// compute container in state s. The phase is compute's: Running while it
// runs, Succeeded or Failed by its exit code. In kubelet mode (s has the
// runtime's records) the phase is Pending until compute is seen running,
// and every container's status is its own, from the runtime's record
// (kubeletContainerStatuses). Otherwise the containers other than compute
// (container disks, the console logger) run and are ready while compute
// runs, and init containers have completed.
func podStatus(pod *k8sv1.Pod, s snapshot, hostIP string) k8sv1.PodStatus {
	st := *pod.Status.DeepCopy()
	started := metav1.NewTime(s.StartedAt)
	st.StartTime = &started
	st.HostIP = hostIP
	st.HostIPs = []k8sv1.HostIP{{IP: hostIP}}
	if s.PodIP != "" {
		st.PodIP, st.PodIPs = s.PodIP, []k8sv1.PodIP{{IP: s.PodIP}}
	}
	running := !s.Exited
	switch {
	case s.Containers != nil && running && !s.Running:
		st.Phase = k8sv1.PodPending
	case running:
		st.Phase = k8sv1.PodRunning
	case s.ExitCode == 0:
		st.Phase = k8sv1.PodSucceeded
	default:
		st.Phase = k8sv1.PodFailed
	}
	initialized, ready := k8sv1.ConditionTrue, k8sv1.ConditionFalse
	if s.Containers != nil {
		st.InitContainerStatuses, st.ContainerStatuses = kubeletContainerStatuses(pod, s)
		initialized, ready = kubeletConditions(pod, st.InitContainerStatuses, st.ContainerStatuses)
	} else {
		st.InitContainerStatuses, st.ContainerStatuses = derivedContainerStatuses(pod, s)
		if running {
			ready = k8sv1.ConditionTrue
		}
	}
	now := metav1.Now()
	set := func(t k8sv1.PodConditionType, status k8sv1.ConditionStatus) {
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != status {
					st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = status, now
				}
				return
			}
		}
		st.Conditions = append(st.Conditions, k8sv1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
	}
	set(k8sv1.PodInitialized, initialized)
	set(k8sv1.ContainersReady, ready)
	set(k8sv1.PodReady, ready)
	return st
}

// derivedContainerStatuses are the container statuses derived from
// compute's state, where the agent runs only compute (agent and KubeVirt
// mode): the others run and are ready while compute runs, and end with it.
func derivedContainerStatuses(pod *k8sv1.Pod, s snapshot) (inits, ctrs []k8sv1.ContainerStatus) {
	started := metav1.NewTime(s.StartedAt)
	running := !s.Exited
	for _, ic := range pod.Spec.InitContainers {
		cs := k8sv1.ContainerStatus{Name: ic.Name, Image: ic.Image, ImageID: ic.Image, Ready: true,
			State: k8sv1.ContainerState{Terminated: &k8sv1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: started}}}
		if isSidecar(ic) && running {
			// A native sidecar (KubeVirt's guest-console-log) runs beside
			// the containers.
			cs.State = k8sv1.ContainerState{Running: &k8sv1.ContainerStateRunning{StartedAt: started}}
		}
		inits = append(inits, cs)
	}
	for _, ctr := range pod.Spec.Containers {
		cs := k8sv1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: running, Started: &running}
		switch {
		case running:
			cs.State.Running = &k8sv1.ContainerStateRunning{StartedAt: started}
		case ctr.Name == computeContainer:
			cs.State.Terminated = computeTerminated(s)
		default:
			cs.State.Terminated = &k8sv1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: started, FinishedAt: metav1.NewTime(s.EndedAt)}
		}
		ctrs = append(ctrs, cs)
	}
	return inits, ctrs
}

// reportPod writes the pod status for s, unless the pod already shows it.
func (a *Agent) reportPod(ctx context.Context, pod *k8sv1.Pod, s snapshot) error {
	want := podStatus(pod, s, "127.0.0.1")
	if pod.Status.Phase == want.Phase && statusSummary(pod.Status) == statusSummary(want) && pod.Status.PodIP == want.PodIP {
		return nil
	}
	if pod.Status.Phase == k8sv1.PodSucceeded || pod.Status.Phase == k8sv1.PodFailed {
		return nil // a terminal pod phase never changes
	}
	updated := pod.DeepCopy()
	updated.Status = want
	if _, err := a.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reporting status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	a.cfg.Logger.Info("pod status", "pod", pod.Namespace+"/"+pod.Name, "phase", want.Phase, "compute", computeState(want), "containers", statusSummary(want))
	return nil
}

// computeState summarises the compute container's state.
func computeState(st k8sv1.PodStatus) string {
	for _, cs := range st.ContainerStatuses {
		if cs.Name == computeContainer {
			return containerState(cs)
		}
	}
	return "none"
}

// syncVMI is virt-handler's part for one VMI.
func (a *Agent) syncVMI(ctx context.Context, key string) error {
	if a.vmis == nil {
		return nil // kubelet-only: VMIs are virt-handler's
	}
	obj, exists, err := a.vmis.GetStore().GetByKey(key)
	if err != nil {
		return fmt.Errorf("reading VMI %s from cache: %w", key, err)
	}
	if !exists {
		return nil
	}
	vmi := obj.(*v1.VirtualMachineInstance)
	c := a.containerOfVMI(vmi.UID)
	if c == nil || a.cfg.Kubelet != nil {
		return nil // in kubelet-only mode VMIs are virt-handler's
	}
	if vmi.DeletionTimestamp != nil && !vmi.IsFinal() {
		c.stop(a.cfg.Logger, graceOr(gracePeriod(vmi), 30*time.Second))
	}
	if vmi.Status.Phase == v1.Scheduled && vmi.DeletionTimestamp == nil {
		if err := a.launch(ctx, c, vmi); err != nil {
			return fmt.Errorf("starting the launcher of VMI %s: %w", key, err)
		}
	}
	return a.reportVMI(ctx, vmi, c.snapshot())
}

// syncVMIOf reports the VMI of c from the cache's latest copy.
func (a *Agent) syncVMIOf(ctx context.Context, c *container) error {
	if a.vmis == nil {
		return nil // kubelet-only: VMIs are virt-handler's
	}
	obj, exists, err := a.vmis.GetStore().GetByKey(c.vmiKey.String())
	if err != nil || !exists {
		return err
	}
	vmi := obj.(*v1.VirtualMachineInstance)
	if vmi.UID != c.vmiUID {
		return nil
	}
	return a.reportVMI(ctx, vmi, c.snapshot())
}

func gracePeriod(vmi *v1.VirtualMachineInstance) time.Duration {
	if vmi.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*vmi.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// vmiTransition is the phase virt-handler would move vmi to, given its
// launcher's state, or "" for none.
func vmiTransition(phase v1.VirtualMachineInstancePhase, s snapshot) (v1.VirtualMachineInstancePhase, string) {
	if phase != v1.Scheduled && phase != v1.Running {
		return "", ""
	}
	if s.Final != nil || s.Exited {
		return finalPhase(s)
	}
	if phase == v1.Scheduled && s.Running {
		return v1.Running, ""
	}
	return "", ""
}

// finalPhase reads the launcher's final event, or its exit code when it
// died without one.
func finalPhase(s snapshot) (v1.VirtualMachineInstancePhase, string) {
	if s.Final != nil {
		reason := s.Final.Reason
		if s.Final.Message != "" {
			reason += ": " + s.Final.Message
		}
		if s.Reason == launchrt.ReasonOOMKilled {
			reason += " (compute container " + launchrt.ReasonOOMKilled + ")"
		}
		if s.Final.Event == launcherapi.EventSucceeded {
			return v1.Succeeded, reason
		}
		return v1.Failed, reason
	}
	if s.ExitCode == 0 {
		return v1.Succeeded, "launcher exited 0"
	}
	if s.Reason == launchrt.ReasonOOMKilled || s.Reason == launchrt.ReasonStartError {
		return v1.Failed, fmt.Sprintf("compute container %s, exit code %d, without a final event", s.Reason, s.ExitCode)
	}
	return v1.Failed, fmt.Sprintf("launcher exited with code %d without a final event", s.ExitCode)
}

// reportVMI moves the VMI to the phase its launcher's state calls for.
func (a *Agent) reportVMI(ctx context.Context, cached *v1.VirtualMachineInstance, s snapshot) error {
	if a.cfg.Kubelet != nil {
		return nil // virt-handler's
	}
	to, reason := vmiTransition(cached.Status.Phase, s)
	if to == "" {
		return nil
	}
	vmis := a.cfg.Client.VirtualMachineInstance(cached.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi, err := vmis.Get(ctx, cached.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if vmi.UID != cached.UID {
			return nil
		}
		to, reason = vmiTransition(vmi.Status.Phase, s)
		if to == "" {
			return nil
		}
		setPhase(vmi, to, time.Now())
		_, err = vmis.Update(ctx, vmi, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reporting phase %s of VMI %s/%s: %w", to, cached.Namespace, cached.Name, err)
	}
	if to != "" {
		a.cfg.Logger.Info("VMI phase", "vmi", cached.Namespace+"/"+cached.Name, "uid", cached.UID, "phase", to, "reason", reason)
	}
	return nil
}

// setPhase moves vmi to phase at t, with its transition timestamp and the
// Ready condition virt-handler keeps.
func setPhase(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase, t time.Time) {
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(t)})
	ready := k8sv1.ConditionFalse
	if phase == v1.Running {
		ready = k8sv1.ConditionTrue
	}
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == v1.VirtualMachineInstanceReady {
			if vmi.Status.Conditions[i].Status != ready {
				vmi.Status.Conditions[i].Status = ready
				vmi.Status.Conditions[i].LastTransitionTime = metav1.NewTime(t)
			}
			return
		}
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, v1.VirtualMachineInstanceCondition{
		Type: v1.VirtualMachineInstanceReady, Status: ready, LastTransitionTime: metav1.NewTime(t)})
}
