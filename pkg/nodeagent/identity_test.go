package nodeagent

import (
	"log/slog"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// A kubelet may list only its node's pods; the scheduler lists the pods
// of no node. The selectors must parse and say exactly that.
func TestPodWatchSelectors(t *testing.T) {
	bound, err := fields.ParseSelector(boundTo("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	if !bound.Matches(fields.Set{"spec.nodeName": "node-a"}) || bound.Matches(fields.Set{"spec.nodeName": "node-b"}) || bound.Matches(fields.Set{"spec.nodeName": ""}) {
		t.Errorf("boundTo(node-a) = %q", bound)
	}
	unbound, err := fields.ParseSelector(unboundPods)
	if err != nil {
		t.Fatal(err)
	}
	if !unbound.Matches(fields.Set{"spec.nodeName": ""}) || unbound.Matches(fields.Set{"spec.nodeName": "node-a"}) {
		t.Errorf("unboundPods = %q", unbound)
	}
}

// The binding goes through the scheduler's client, never the kubelet's
// (Config.Client is left nil here: any use of it would panic).
func TestBindGoesThroughTheSchedulerClient(t *testing.T) {
	pod := &k8sv1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-x", Namespace: "default", UID: "pod-uid"},
		Status: k8sv1.PodStatus{Phase: k8sv1.PodPending}}
	sched := fake.NewClientset(pod)
	a := &Agent{cfg: Config{Scheduler: sched, NodeName: "node-a", Kubelet: &KubeletMode{}}}
	a.cfg.Logger = discard()
	a.unbound = cache.NewSharedIndexInformer(&cache.ListWatch{}, &k8sv1.Pod{}, 0, cache.Indexers{})
	if err := a.unbound.GetStore().Add(pod); err != nil {
		t.Fatal(err)
	}
	if err := a.syncBind(t.Context(), "default/virt-launcher-x"); err != nil {
		t.Fatal(err)
	}
	var bound *k8sv1.Binding
	for _, act := range sched.Actions() {
		if c, ok := act.(k8stesting.CreateAction); ok && act.GetSubresource() == "binding" {
			bound = c.GetObject().(*k8sv1.Binding)
		}
	}
	if bound == nil || bound.Target.Name != "node-a" || bound.UID != "pod-uid" {
		t.Fatalf("binding %+v; actions %v", bound, sched.Actions())
	}

	// A pod that is gone from the unbound cache (bound meanwhile), ending
	// or no longer pending is left alone.
	sched.ClearActions()
	for _, p := range []*k8sv1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: "default"}, Spec: k8sv1.PodSpec{NodeName: "node-b"}, Status: k8sv1.PodStatus{Phase: k8sv1.PodPending}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ending", Namespace: "default", DeletionTimestamp: &metav1.Time{}}, Status: k8sv1.PodStatus{Phase: k8sv1.PodPending}},
		{ObjectMeta: metav1.ObjectMeta{Name: "failed", Namespace: "default"}, Status: k8sv1.PodStatus{Phase: k8sv1.PodFailed}},
	} {
		if err := a.unbound.GetStore().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"default/bound", "default/ending", "default/failed", "default/gone"} {
		if err := a.syncBind(t.Context(), key); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	if acts := sched.Actions(); len(acts) != 0 {
		t.Errorf("actions on pods not to bind: %v", acts)
	}
}

// As kubelet the agent knows a pod's VMI only by the pod's controller
// reference: no VMI is read (a real kubelet never reads VMIs).
func TestVMIRefIsThePodsControllerReference(t *testing.T) {
	yes := true
	pod := &k8sv1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm-abcde", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{Kind: "VirtualMachineInstance", Name: "vm", UID: "vmi-uid", Controller: &yes}}}}
	key, uid, err := vmiRef(pod)
	if err != nil || key != (types.NamespacedName{Namespace: "ns", Name: "vm"}) || uid != "vmi-uid" {
		t.Fatalf("vmiRef = %v %v %v", key, uid, err)
	}
	pod.OwnerReferences[0].Kind = "ReplicaSet"
	if _, _, err := vmiRef(pod); err == nil {
		t.Error("a pod owned by a ReplicaSet has a VMI")
	}
	// The kubelet-only agent re-queues only the pod when a container
	// changes: there is no VMI watch to feed.
	a := &Agent{cfg: Config{Kubelet: &KubeletMode{}}}
	a.queue = newTestQueue(t)
	c := &container{podKey: types.NamespacedName{Namespace: "ns", Name: pod.Name}, vmiKey: key}
	a.notifier(c)()
	if n := a.queue.Len(); n != 1 {
		t.Errorf("queued %d keys, want the pod's only", n)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newTestQueue(t *testing.T) workqueue.TypedRateLimitingInterface[string] {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(q.ShutDown)
	return q
}
