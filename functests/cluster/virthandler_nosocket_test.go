package cluster_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

// Row H5 of #21: a launcher that dies before its command socket appears
// while its container stays, which KubeVirt's own functional-test hooks
// make: the fail-fast annotation (virt-launcher panics before its socket)
// with kubevirt.io/keep-launcher-alive-after-failure (the launcher monitor
// keeps the container for debugging). virt-handler finds the pod without a
// socket and waits for one: 3 minutes from its first look
// (IsLauncherClientUnresponsive in pkg/virt-handler/launcher-clients), then
// the Scheduled VMI is Failed (calculateVmPhaseForStatusReason in
// pkg/virt-handler/vm.go).
var _ = Describe("KubeVirt's virt-handler and a launcher dead before its socket", Label("virt-handler"), Ordered, func() {
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) { s, kc = virtHandlerStack(ctx) })

	It("waits 3 minutes for the socket of a kept launcher container, then fails the Scheduled VMI (H5)", func(ctx SpecContext) {
		name := fmt.Sprintf("vh-nosocket-%d", time.Now().Unix()%100000)
		w := watchVMI(kc, name)
		vmi := createNoNetVMIWith(ctx, kc, name, map[string]string{
			v1.FuncTestLauncherFailFastAnnotation: "true",
			v1.KeepLauncherAfterFailureAnnotation: "true",
		})
		DeferCleanup(keepRestartLogs, s, name)
		scheduled := w.await(v1.Scheduled, 2*time.Minute, s)
		pod := w.onlyPod()
		compute := func() string {
			out, err := podman("ps", "--all", "--filter", "label="+nodeagent.LabelPodUID+"="+string(pod.UID),
				"--filter", "label="+nodeagent.LabelContainerName+"=compute", "--format", "{{.Status}}")
			Expect(err).NotTo(HaveOccurred(), "podman ps: %s", out)
			return out
		}
		Expect(compute()).To(HavePrefix("Up "), "pod %s's compute container, its launcher crashed, kept", pod.Name)

		By("virt-handler looks at the VMI every second and finds no socket; the VMI stays Scheduled for 3 minutes")
		Consistently(w.latestPhase).WithTimeout(170*time.Second).WithPolling(time.Second).Should(Equal(string(v1.Scheduled)), "VMI %s", name)
		Expect(compute()).To(HavePrefix("Up "), "pod %s's compute container after 170 s", pod.Name)
		failed := w.await(v1.Failed, time.Minute, s)
		waited := failed.Sub(scheduled)
		Expect(waited).To(BeNumerically(">=", 3*time.Minute-time.Second), "Scheduled → Failed")
		Expect(waited).To(BeNumerically("<", 3*time.Minute+15*time.Second), "Scheduled → Failed")
		Expect(compact(w.phasesSince(w.began))).To(Equal([]string{"Pending", "Scheduling", "Scheduled", "Failed"}), "VMI %s phases", name)
		Expect(w.vmiUIDs()).To(ConsistOf(vmi.UID), "VMIs named %s seen", name)
		Expect(w.podUIDs()).To(ConsistOf(pod.UID), "launcher pods of %s seen", name)
		looks := handlerMsgs(s, vmi.UID, scheduled, "VMI is in phase: Scheduled | Domain does not exist")
		Expect(len(looks)).To(BeNumerically(">=", 60), "virt-handler's looks at VMI %s while it waited", name)
		Expect(handlerMsgs(s, vmi.UID, w.began, "Synchronizing the VirtualMachineInstance failed")).To(BeEmpty(), "no Sync was ever attempted: there was no socket")

		row := fidelityRow("H5")
		AddReportEntry("cluster-virt-handler-no-socket", fmt.Sprintf("%s, KubeVirt %s: VMI %s Scheduled with its compute container running and no launcher socket; Failed %v later, after %d looks by virt-handler; phases %v. Rule: %s",
			row.ID, kubevirtVersion(ctx), name, waited.Round(100*time.Millisecond), len(looks), compact(w.phasesSince(w.began)), strings.TrimSpace(row.Upstream)))
	})
})
