package clusterlite

import (
	"context"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// testNode is the node whose kubelet TestControlPlane authenticates.
const testNode = "clusterlite-test-node"

func TestTokenLines(t *testing.T) {
	for _, tc := range []struct {
		user User
		want string
	}{
		{User{Name: "system:serviceaccount:kubevirt:kubevirt-handler"},
			`tok,system:serviceaccount:kubevirt:kubevirt-handler,system:serviceaccount:kubevirt:kubevirt-handler,"system:serviceaccounts,system:serviceaccounts:kubevirt"`},
		{User{Name: "system:serviceaccount:kubevirt:kubevirt-controller", Groups: []string{MastersGroup}},
			`tok,system:serviceaccount:kubevirt:kubevirt-controller,system:serviceaccount:kubevirt:kubevirt-controller,"system:serviceaccounts,system:serviceaccounts:kubevirt,system:masters"`},
		{User{Name: NodeUser("node01")}, `tok,system:node:node01,system:node:node01,"system:nodes"`},
		{User{Name: NodeUser("node01"), Groups: []string{NodesGroup}}, `tok,system:node:node01,system:node:node01,"system:nodes"`},
		{User{Name: SchedulerUser}, `tok,system:kube-scheduler,system:kube-scheduler,"system:authenticated"`},
	} {
		got, err := tokenLine("tok", tc.user)
		if err != nil {
			t.Errorf("%+v: %v", tc.user, err)
			continue
		}
		if got != tc.want+"\n" {
			t.Errorf("%+v:\n got %q\nwant %q", tc.user, got, tc.want+"\n")
		}
	}
	for _, bad := range []User{{}, {Name: "a,b"}, {Name: `a"b`}, {Name: "a\nb"}, {Name: "x", Groups: []string{"g,h"}}, {Name: "x", Groups: []string{""}}} {
		if _, err := tokenLine("tok", bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// checkNodeAndScheduler checks that the API server confines a node's user
// as a cluster's does (Node authorizer, NodeRestriction) and that the
// scheduler's user may bind what a kubelet may not.
func checkNodeAndScheduler(ctx context.Context, t *testing.T, cp *ControlPlane, ns string) {
	admin, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubernetes.NewForConfig(cp.RESTConfigFor(NodeUser(testNode)))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := kubernetes.NewForConfig(cp.RESTConfigFor(SchedulerUser))
	if err != nil {
		t.Fatal(err)
	}
	review, err := node.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node's self subject review: %v", err)
	}
	if u := review.Status.UserInfo; u.Username != NodeUser(testNode) || !strings.Contains(strings.Join(u.Groups, ","), NodesGroup) {
		t.Errorf("the node's token authenticates as %q in %v", u.Username, u.Groups)
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden", what, err)
		}
	}

	// A kubelet registers its own Node and reports its status; another
	// node's object is refused by NodeRestriction.
	if _, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node creates its Node: %v", err)
	}
	patch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`)
	if _, err := node.CoreV1().Nodes().Patch(ctx, testNode, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the node patches its own status: %v", err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = node.CoreV1().Nodes().Patch(ctx, "other-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	forbidden("the node patches another node's status", err)

	// Pods: a kubelet lists only its own node's and may not bind; the
	// scheduler lists all and binds.
	_, err = node.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	forbidden("the node lists every pod", err)
	if _, err := node.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + testNode}); err != nil {
		t.Errorf("the node lists its own pods: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unbound", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	if pod, err = admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns, UID: pod.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: testNode}}
	forbidden("the node binds a pod", node.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}))
	if _, err := sched.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="}); err != nil {
		t.Errorf("the scheduler lists unbound pods: %v", err)
	}
	if err := sched.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Errorf("the scheduler binds a pod: %v", err)
	}
	// Bound to the node, the pod is the kubelet's to read and its status
	// the kubelet's to write. The Node authorizer learns the binding from
	// its own pod watch, so the node's first reads may still be refused:
	// wait, with a deadline, until the graph has the edge.
	name := pod.Name
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := node.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		pod = got
		return true, nil
	}); err != nil {
		t.Fatalf("the node reads its bound pod within 30 s (the Node authorizer's graph learns the binding): %v", err)
	}
	pod.Status.Phase = corev1.PodPending
	if _, err := node.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the node updates its pod's status: %v", err)
	}
	_, err = node.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	forbidden("the node reads a namespace", err)
}
