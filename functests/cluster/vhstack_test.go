package cluster_test

import (
	"os"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

// vhNode is the node of the stack with KubeVirt's own virt-handler.
const vhNode = "virt-handler-node"

// domainResync is how often the suite's virt-handler re-reads every
// launcher's domain (--domain-resync-period-seconds; the DaemonSet leaves
// it at virt-handler's 300 s): VH_DOMAIN_RESYNC, 20 s by default. Only a
// domain change that no notification carried waits for it, which is what
// the start-time restart row (H2) shows; the other rows do not depend on
// it.
func domainResync() time.Duration {
	d, err := time.ParseDuration(envOr("VH_DOMAIN_RESYNC", "20s"))
	Expect(err).NotTo(HaveOccurred(), "VH_DOMAIN_RESYNC: want a duration such as 20s or 5m")
	Expect(d).To(BeNumerically(">=", time.Second), "VH_DOMAIN_RESYNC: at least 1s")
	return d
}

// sharedVH is the suite's cluster-lite whose node side is KubeVirt's
// virt-handler: started by the first spec that asks for it, stopped, with
// its tear-down checks, after the suite.
type sharedVH struct {
	s        *liteStack
	kc       kubecli.KubevirtClient
	hadImage bool
}

// vh is the suite's virt-handler stack; ginkgo runs the suite's specs one
// after another in one process, so only its goroutine touches it.
var vh sharedVH

// virtHandlerStack is the suite's virt-handler stack, started on first use
// and ready for VMIs: virt-handler's device plugins registered with the
// agent's Registration server and the node schedulable. Specs that use it
// leave no VM or VMI behind.
func virtHandlerStack(ctx SpecContext) (*liteStack, kubecli.KubevirtClient) {
	skipWithoutVirtHandler()
	if vh.s != nil {
		return vh.s, vh.kc
	}
	_, imageErr := podman("image", "exists", testguest.Image)
	hadImage := imageErr == nil

	By("a second cluster-lite whose node side is KubeVirt's virt-handler")
	before := tmpEntries()
	s := runLite(liteBinDir(), "clusterlite-virt-handler.log", "--node-side", "virt-handler", "--node-name", vhNode,
		"--virt-handler-flag=--domain-resync-period-seconds="+strconv.Itoa(int(domainResync().Seconds())))
	s.tmpBefore = before
	vh = sharedVH{s: s, hadImage: hadImage}
	kc, err := kubecli.GetKubevirtClientFromFlags("", s.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	vh.kc = kc

	By("virt-handler makes the node schedulable once its device plugins registered with the agent's Registration server")
	var node *k8sv1.Node
	Eventually(func() string {
		if node, err = kc.CoreV1().Nodes().Get(ctx, vhNode, metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		return node.Labels[v1.NodeSchedulable] + " " + node.Annotations[v1.VirtHandlerHeartbeat]
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(MatchRegexp(`^true \d{4}-`), "node %s; stack log %s", vhNode, s.logPath)
	Eventually(func() int64 {
		if node, err = kc.CoreV1().Nodes().Get(ctx, vhNode, metav1.GetOptions{}); err != nil {
			return -1
		}
		kvm := node.Status.Capacity["devices.kubevirt.io/kvm"]
		return kvm.Value()
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(BeNumerically(">", 0), "the kvm plugin's healthy devices as the node's capacity")
	return s, kc
}

// stopVirtHandlerStack stops the suite's virt-handler stack, if a spec
// started it, and checks that it left no container, mount or image.
func stopVirtHandlerStack() {
	if vh.s == nil {
		return
	}
	s := vh.s
	vh.s = nil
	s.stop()
	out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelNode+"="+vhNode, "--format", "{{.Names}}")
	Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
	Expect(out).To(BeEmpty(), "containers of node %s left after tear-down", vhNode)
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	Expect(err).NotTo(HaveOccurred())
	Expect(string(mounts)).NotTo(ContainSubstring(s.stateDir), "mounts under the state folder left on the host")
	if !vh.hadImage {
		_, err := podman("image", "exists", testguest.Image)
		Expect(err).To(HaveOccurred(), "the node imported %s and left it in podman's store", testguest.Image)
	}
}
