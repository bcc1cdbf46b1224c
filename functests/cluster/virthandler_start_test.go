package cluster_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// Rows of #21 on a VMI whose start is in flight: virt-handler v1.6.0's
// Sync (SyncVirtualMachine, 20 s gRPC deadline) waits while our launcher
// holds the started QEMU paused (the qemu-slow-start fault), which is
// where a restarted virt-handler (H2) or a Sync past its deadline (H3,
// kubevirt/kubevirt#17367) meets the domain. During the hold our
// KubeVirt-mode launcher pushes Shutoff/Unknown and answers GetDomain
// with Paused/StartingUp, as KubeVirt's launcher over libvirt does.
var _ = Describe("KubeVirt's virt-handler while a VMI starts", Label("virt-handler"), Ordered, func() {
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) { s, kc = virtHandlerStack(ctx) })

	It("killed with SIGKILL during the VMI's Sync, is followed by one that finds the starting domain alive: the VMI reaches Running with the same QEMU, no new VMI or pod (H2)", func(ctx SpecContext) {
		name := fmt.Sprintf("vh-startkill-%d", time.Now().Unix()%100000)
		w := watchVMI(kc, name)
		vmi := createNoNetVMIWith(ctx, kc, name, map[string]string{faults.AnnotationPrefix + "qemu-slow-start": "after=15s"})
		DeferCleanup(keepRestartLogs, s, name)
		pod := w.onlyPod()
		qemu := qemuOf(ctx, s, pod, name)
		Expect(w.latestPhase()).To(Equal(string(v1.Scheduled)), "VMI %s while its QEMU is held: virt-handler's Sync is in flight", name)

		r := awaitHandler(ctx, s, kc, killHandler(ctx, s))
		synced := handlerSynced(s, r, vmi.UID)
		running := w.await(v1.Running, 2*time.Minute, s)
		Expect(qemuOf(ctx, s, pod, name)).To(Equal(qemu), "the QEMU of pod %s (host PID and start time) after the restart", pod.Name)
		Expect(w.vmiUIDs()).To(ConsistOf(vmi.UID), "VMIs named %s seen", name)
		Expect(w.podUIDs()).To(ConsistOf(pod.UID), "launcher pods of %s seen", name)
		Expect(w.deleted()).To(BeEmpty(), "nothing of %s deleted", name)
		Expect(handlerMsgs(s, vmi.UID, r.killed, "Deleting inactive domain", "Signaled deletion")).To(BeEmpty(),
			"the restarted virt-handler took the starting domain for inactive")

		By("the VMI stays Running through the rest of the hold and after it")
		Consistently(func() string { return w.latestPhase() + fmt.Sprintf(" QEMU alive %v", qemu.Alive()) }).
			WithTimeout(time.Until(r.killed.Add(20*time.Second))+3*time.Second).WithPolling(200*time.Millisecond).
			Should(Equal("Running QEMU alive true"), "VMI %s", name)

		row := fidelityRow("H2")
		AddReportEntry("cluster-virt-handler-restart-starting", fmt.Sprintf("%s: virt-handler %d SIGKILLed with VMI %s Scheduled and its QEMU %d held; a new one %v later; its first look at the VMI %v after the kill: %q; VMI Running %v after the kill, phases %v; same QEMU, one VMI, one pod. Rule: %s",
			row.ID, r.old.PID, name, qemu.PID, r.back.Sub(r.killed).Round(100*time.Millisecond), synced.at.Sub(r.killed).Round(100*time.Millisecond), synced.line,
			running.Sub(r.killed).Round(100*time.Millisecond), compact(w.phasesSince(w.began)), row.Upstream))
	})

	It("gives up a Sync slower than its 20 s deadline, takes the starting domain for inactive and deletes it (H3, kubevirt/kubevirt#17367)", func(ctx SpecContext) {
		name := fmt.Sprintf("vh-slowsync-%d", time.Now().Unix()%100000)
		w := watchVMI(kc, name)
		vmi := createNoNetVMIWith(ctx, kc, name, map[string]string{faults.AnnotationPrefix + "qemu-slow-start": "after=35s"})
		DeferCleanup(keepRestartLogs, s, name)
		pod := w.onlyPod()
		qemu := qemuOf(ctx, s, pod, name)
		held := time.Now()

		Eventually(func() []string {
			return handlerMsgs(s, vmi.UID, w.began, "Deleting inactive domain")
		}).WithTimeout(90*time.Second).WithPolling(200*time.Millisecond).ShouldNot(BeEmpty(), "virt-handler's log %s", handlerLog(s))
		deleting := time.Now()
		// Observe until the hold is long over.
		Consistently(func() bool { return true }).WithTimeout(time.Until(held.Add(60 * time.Second))).Should(BeTrue())
		msgs := handlerMsgs(s, vmi.UID, w.began)
		fmt.Fprintf(GinkgoWriter, "virt-handler on VMI %s:\n%s\n", name, strings.Join(msgs, "\n"))
		AddReportEntry("cluster-virt-handler-slow-sync", fmt.Sprintf("H3: QEMU %d held 35 s; \"Deleting inactive domain\" %v after the hold began; VMI phases %v; QEMU alive %v; VMIs %d, pods %d, deleted %v",
			qemu.PID, deleting.Sub(held).Round(100*time.Millisecond), compact(w.phasesSince(w.began)), qemu.Alive(), len(w.vmiUIDs()), len(w.podUIDs()), w.deleted()))
	})
})

// handlerMsgs lists the msg fields of virt-handler's log lines about the
// VMI uid stamped after since that contain one of words (all lines for
// none).
func handlerMsgs(s *liteStack, uid types.UID, since time.Time, words ...string) []string {
	b, err := os.ReadFile(handlerLog(s))
	Expect(err).NotTo(HaveOccurred())
	var msgs []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, string(uid)) {
			continue
		}
		if at, ok := stampOf(l); !ok || at.Before(since) {
			continue
		}
		m := msgOf(l)
		if len(words) == 0 || slices.ContainsFunc(words, func(w string) bool { return strings.Contains(m, w) }) {
			msgs = append(msgs, m)
		}
	}
	return msgs
}
