package cluster_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authv1 "k8s.io/api/authentication/v1"
	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/testguest"
)

// The agent's kubelet part authenticates as the node's kubelet, and the
// API server's Node authorizer and NodeRestriction confine it as they
// confine a real kubelet: "the agent writes nothing to VMIs" is enforced,
// not only observed in managedFields.
var _ = Describe("the node agent's kubelet identity under KubeVirt's virt-handler", Label("virt-handler"), func() {
	It("is system:node:<node> in system:nodes: refused (403) a patch of a Running VMI's status and a read of it, allowed a patch of its own node's status", func(ctx SpecContext) {
		s, kc := virtHandlerStack(ctx)
		Expect(s.kubeletKubeconfig).NotTo(BeEmpty(), "clusterlite up printed no KUBELET_KUBECONFIG=; stack log %s", s.logPath)
		kubelet, err := kubecli.GetKubevirtClientFromFlags("", s.kubeletKubeconfig)
		Expect(err).NotTo(HaveOccurred())

		By("the kubeconfig authenticates as the node's kubelet")
		review, err := kubelet.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(review.Status.UserInfo.Username).To(Equal("system:node:" + s.node))
		Expect(review.Status.UserInfo.Groups).To(ContainElement("system:nodes"))
		Expect(review.Status.UserInfo.Groups).NotTo(ContainElement("system:masters"))
		stackLog, err := os.ReadFile(s.logPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(stackLog)).To(ContainSubstring(`msg="node agent identities" kubelet=system:node:`+s.node+" scheduler=system:kube-scheduler"),
			"the stack's agent runs with this identity; stack log %s", s.logPath)

		By("a VMI running on the node, its pod bound, started and reported by the agent as this kubelet")
		name := fmt.Sprintf("vh-id-%d", time.Now().Unix()%100000)
		vmi := testguest.VMI(testguest.Spec{Name: name, Namespace: namespace()})
		noPodNet := false
		vmi.Spec.Domain.Devices.AutoattachPodInterface = &noPodNet
		vmi, err = kc.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, pod, _ := waitVHRunning(ctx, kc, vmi, 4*time.Minute, func() string { return fmt.Sprintf("VMI %s; stack log %s", name, s.logPath) })
		DeferCleanup(func(ctx SpecContext) {
			Expect(kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
			waitPodGone(ctx, kc, pod)
		})

		// A VMI has no status subresource (virt-handler updates the whole
		// object; KubeVirt's webhook keeps its status from anyone but
		// KubeVirt's service accounts), so the status is patched on the
		// VMI itself. Dry run: a patch that got past authorization changes
		// nothing, and the admin's shows that the request itself is valid.
		patch := []byte(`{"status":{"reason":"written by the node agent"}}`)
		dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
		By("the admin's dry-run patch of the VMI's status is accepted (the control)")
		_, err = kc.VirtualMachineInstance(namespace()).Patch(ctx, name, types.MergePatchType, patch, dry)
		Expect(err).NotTo(HaveOccurred())

		By("the kubelet's patch of the VMI's status is refused with 403 Forbidden, as is a read of the VMI")
		_, patchErr := kubelet.VirtualMachineInstance(namespace()).Patch(ctx, name, types.MergePatchType, patch, dry)
		Expect(apierrors.IsForbidden(patchErr)).To(BeTrue(), "want 403 Forbidden, got %v", patchErr)
		_, getErr := kubelet.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
		Expect(apierrors.IsForbidden(getErr)).To(BeTrue(), "want 403 Forbidden, got %v", getErr)
		_, listErr := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(listErr)).To(BeTrue(), "a kubelet lists only its node's pods; got %v", listErr)

		By("the kubelet's patch of its own node's status is accepted: the Ready condition's heartbeat, as kubelet writes it")
		beat := metav1.Now().UTC().Format(time.RFC3339)
		nodePatch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","lastHeartbeatTime":%q}]}}`, beat)
		node, err := kubelet.CoreV1().Nodes().Patch(ctx, s.node, types.StrategicMergePatchType, []byte(nodePatch), metav1.PatchOptions{}, "status")
		Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(node.Status.Conditions, func(c k8sv1.NodeCondition) bool { return c.Type == k8sv1.NodeReady })
		Expect(i).To(BeNumerically(">=", 0))
		Expect(node.Status.Conditions[i].Status).To(Equal(k8sv1.ConditionTrue), "the patch changed only the heartbeat")
		Expect(node.Status.Conditions[i].LastHeartbeatTime.UTC().Format(time.RFC3339)).To(Equal(beat))

		By("the VMI is untouched: its reason is not the patch's, and nothing of the agent is among its managers")
		vmi, err = kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Reason).NotTo(Equal("written by the node agent"))
		Expect(managersOf(vmi.ManagedFields)).NotTo(ContainElement("clusterlite"))

		// How many requests authorization refused over the stack's life is
		// recorded, not asserted: the Node authorizer learns a pod's binding
		// from its own watch, so a kubelet's first status write of a pod
		// just bound can be refused once and retried, as real kubelets'
		// are; an exact count would depend on that timing. What the agent
		// is allowed shows in the other virt-handler specs, which need it.
		authz, admission := refusals(ctx, kc)
		Expect(authz).To(BeNumerically(">=", 3), "requests refused by authorization (authorization_attempts_total, no-opinion and denied): at least this spec's VMI patch, VMI get and pod list")
		AddReportEntry("cluster-virt-handler-kubelet-identity", fmt.Sprintf("as %s %v: VMI status patch → %s; VMI get → %s; list of all pods → %s; own node status patch → accepted; over the stack's life %d requests refused by authorization, and these answered 403 by admission: %v",
			review.Status.UserInfo.Username, review.Status.UserInfo.Groups, firstLine(patchErr), firstLine(getErr), firstLine(listErr), authz, admission))
	})
})

// refusals reads from the API server's metrics how many requests its
// authorizers refused (authorization_attempts_total, results no-opinion
// and denied: the metric has no user or resource) and the series of
// requests answered 403 past authorization, by admission
// (apiserver_request_total, which counts only requests that reached a
// handler).
func refusals(ctx SpecContext, kc kubecli.KubevirtClient) (authz int, admission []string) {
	body, err := kc.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "the API server's /metrics")
	for _, line := range strings.Split(string(body), "\n") {
		i := strings.LastIndex(line, " ")
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		n, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case line[:i] == `authorization_attempts_total{result="no-opinion"}`, line[:i] == `authorization_attempts_total{result="denied"}`:
			authz += int(n)
		case strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `code="403"`):
			admission = append(admission, line)
		}
	}
	return authz, admission
}

// firstLine is err's message up to its first line break.
func firstLine(err error) string {
	if err == nil {
		return "accepted"
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
