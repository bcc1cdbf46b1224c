package cluster_test

import (
	"fmt"
	"os"
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
// leave no VM or VMI behind. Its virt-handler has the DaemonSet's command
// line, nothing added.
func virtHandlerStack(ctx SpecContext) (*liteStack, kubecli.KubevirtClient) {
	skipWithoutVirtHandler()
	if vh.s == nil {
		vh = startVirtHandlerStack(ctx, vhNode, "clusterlite-virt-handler.log")
	}
	return vh.s, vh.kc
}

// startVirtHandlerStack starts a cluster-lite whose node side is KubeVirt's
// virt-handler, on node node, with flags added to virt-handler's command
// line, and waits until it is ready for VMIs.
func startVirtHandlerStack(ctx SpecContext, node, logName string, handlerFlags ...string) sharedVH {
	_, imageErr := podman("image", "exists", testguest.Image)
	hadImage := imageErr == nil

	By(fmt.Sprintf("a cluster-lite whose node side is KubeVirt's virt-handler, node %s, virt-handler flags added: %q", node, handlerFlags))
	before := tmpEntries()
	args := []string{"--node-side", "virt-handler", "--node-name", node}
	for _, f := range handlerFlags {
		args = append(args, "--virt-handler-flag="+f)
	}
	s := runLite(liteBinDir(), logName, args...)
	s.tmpBefore = before
	s.node = node
	kc, err := kubecli.GetKubevirtClientFromFlags("", s.kubeconfig)
	Expect(err).NotTo(HaveOccurred())

	By("virt-handler makes the node schedulable once its device plugins registered with the agent's Registration server")
	var n *k8sv1.Node
	Eventually(func() string {
		if n, err = kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		return n.Labels[v1.NodeSchedulable] + " " + n.Annotations[v1.VirtHandlerHeartbeat]
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(MatchRegexp(`^true \d{4}-`), "node %s; stack log %s", node, s.logPath)
	Eventually(func() int64 {
		if n, err = kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			return -1
		}
		kvm := n.Status.Capacity["devices.kubevirt.io/kvm"]
		return kvm.Value()
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(BeNumerically(">", 0), "the kvm plugin's healthy devices as the node's capacity")
	return sharedVH{s: s, kc: kc, hadImage: hadImage}
}

// stopVirtHandlerStack stops the suite's virt-handler stack, if a spec
// started it, with stopHandlerStack's checks.
func stopVirtHandlerStack() {
	if vh.s == nil {
		return
	}
	v := vh
	vh = sharedVH{}
	v.stop()
}

// stop stops a virt-handler stack and checks that it left no container,
// mount or image.
func (v sharedVH) stop() {
	s := v.s
	s.stop()
	out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelNode+"="+s.node, "--format", "{{.Names}}")
	Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
	Expect(out).To(BeEmpty(), "containers of node %s left after tear-down", s.node)
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	Expect(err).NotTo(HaveOccurred())
	Expect(string(mounts)).NotTo(ContainSubstring(s.stateDir), "mounts under the state folder left on the host")
	if !v.hadImage {
		_, err := podman("image", "exists", testguest.Image)
		Expect(err).To(HaveOccurred(), "the node imported %s and left it in podman's store", testguest.Image)
	}
}
