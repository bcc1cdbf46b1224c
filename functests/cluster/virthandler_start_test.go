package cluster_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// Rows of #21 on a VMI whose start is in flight: virt-handler's Sync
// (SyncVirtualMachine, 20 s gRPC deadline) waits while our launcher holds
// the started QEMU paused (the qemu-slow-start fault), which is where a
// restarted virt-handler (H2) or a Sync past its deadline (H3,
// kubevirt/kubevirt#17367) meets the domain. During the hold our
// KubeVirt-mode launcher pushes Shutoff/Unknown and answers GetDomain with
// Paused/StartingUp, as KubeVirt's launcher over libvirt does.
//
// H2's VMI reaches Running only at virt-handler's next domain resync,
// every --domain-resync-period-seconds (the DaemonSet leaves virt-handler's
// 300 s), so H2 has a stack of its own whose virt-handler resyncs every
// 20 s; the suite's shared stack keeps the default, since a resync inside
// a Sync's 20 s changes what H3 sees (it puts the launcher's
// Paused/StartingUp into the domain cache before the deadline).
var _ = Describe("KubeVirt's virt-handler restarted while a VMI starts", Label("virt-handler"), Ordered, func() {
	const resync = 20 * time.Second
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) {
		skipWithoutVirtHandler()
		v := startVirtHandlerStack(ctx, "virt-handler-resync-node", "clusterlite-virt-handler-resync.log",
			fmt.Sprintf("--domain-resync-period-seconds=%d", int(resync.Seconds())))
		DeferCleanup(v.stop)
		s, kc = v.s, v.kc
	})

	It("killed with SIGKILL while the VMI's QEMU starts, is followed by one that leaves the VMI Scheduled past the start's end, until its next domain resync, then Running with the same QEMU (H2)", func(ctx SpecContext) {
		const hold = 12 * time.Second
		h := startHeld(ctx, s, kc, "vh-startkill", hold)
		name, w, vmi, pod, qemu, holdEnd := h.name, h.w, h.vmi, h.pod, h.qemu, h.end
		Expect(w.latestPhase()).To(Equal(string(v1.Scheduled)), "VMI %s while its QEMU is held: virt-handler's Sync is in flight", name)

		r := awaitHandler(ctx, s, kc, killHandler(ctx, s))
		Expect(holdEnd.After(r.back)).To(BeTrue(), "the new virt-handler (%v after the kill) came while the start was still held", r.back.Sub(r.killed).Round(100*time.Millisecond))

		By("after our launcher's start has ended, the VMI is still Scheduled: the restarted virt-handler listed the domain Paused/StartingUp, which it takes for a migration in progress, and nothing tells it the domain runs now")
		Consistently(w.latestPhase).WithTimeout(time.Until(holdEnd.Add(3*time.Second))).WithPolling(200*time.Millisecond).
			Should(Equal(string(v1.Scheduled)), "VMI %s until 3 s after its start's hold ended", name)
		Expect(handlerMsgs(s, vmi.UID, r.killed, "VMI is in phase")).To(BeEmpty(), "the restarted virt-handler synced VMI %s before its start ended", name)

		By("the first domain resync after the start's end reads the domain Running, and virt-handler syncs the VMI Running")
		var tick time.Time
		Eventually(func() bool {
			tick = firstHandlerLine(s, holdEnd, "resyncing virt-launcher domains")
			return !tick.IsZero()
		}).WithTimeout(time.Until(holdEnd.Add(resync+30*time.Second))).WithPolling(200*time.Millisecond).Should(BeTrue(),
			"virt-handler's domain resync (every %v) after %s; its log %s", resync, holdEnd.Format(time.RFC3339), handlerLog(s))
		running := w.await(v1.Running, time.Until(tick.Add(30*time.Second)), s)
		synced := handlerSynced(s, r, vmi.UID)
		Expect(synced.at).To(BeTemporally(">=", tick.Add(-time.Second)), "the restarted virt-handler's first sync of VMI %s (%q) comes with the resync of %s", name, synced.line, tick.Format(time.RFC3339Nano))
		Expect(running).To(BeTemporally("~", tick, 5*time.Second), "VMI %s Running at the resync of %s", name, tick.Format(time.RFC3339Nano))
		Expect(compact(w.phasesSince(w.began))).To(Equal([]string{"Pending", "Scheduling", "Scheduled", "Running"}), "VMI %s phases", name)
		Expect(qemuOf(ctx, s, pod, name)).To(Equal(qemu), "the QEMU of pod %s (host PID and start time) after the restart", pod.Name)
		Expect(w.vmiUIDs()).To(ConsistOf(vmi.UID), "VMIs named %s seen", name)
		Expect(w.podUIDs()).To(ConsistOf(pod.UID), "launcher pods of %s seen", name)
		Expect(w.deleted()).To(BeEmpty(), "nothing of %s deleted", name)
		Expect(handlerMsgs(s, vmi.UID, r.killed, "Deleting inactive domain", "Signaled deletion")).To(BeEmpty(),
			"the restarted virt-handler took the starting domain for inactive")

		row := fidelityRow("H2")
		AddReportEntry("cluster-virt-handler-restart-starting", fmt.Sprintf("%s, KubeVirt %s: virt-handler %d SIGKILLed with VMI %s Scheduled and its QEMU %d held %v; a new one %v later; the hold ended %v after the kill; the VMI stayed Scheduled until the domain resync %v after the kill (period %v), its first sync %v after the kill (%q), Running %v after the kill; phases %v; same QEMU, one VMI, one pod. Rule: %s",
			row.ID, kubevirtVersion(ctx), r.old.PID, name, qemu.PID, hold, r.back.Sub(r.killed).Round(100*time.Millisecond), holdEnd.Sub(r.killed).Round(100*time.Millisecond),
			tick.Sub(r.killed).Round(100*time.Millisecond), resync, synced.at.Sub(r.killed).Round(100*time.Millisecond), synced.line,
			running.Sub(r.killed).Round(100*time.Millisecond), compact(w.phasesSince(w.began)), row.Upstream))
	})

})

var _ = Describe("KubeVirt's virt-handler while a VMI starts", Label("virt-handler"), Ordered, func() {
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) { s, kc = virtHandlerStack(ctx) })

	It("gives up a Sync slower than its 20 s deadline, takes the starting domain for inactive, undefines it and cleans the VMI up under its running guest, which then stays Scheduled (H3, kubevirt/kubevirt#17367)", func(ctx SpecContext) {
		const hold = 25 * time.Second
		h := startHeld(ctx, s, kc, "vh-slowsync", hold)
		name, w, vmi, pod, qemu, holdEnd := h.name, h.w, h.vmi, h.pod, h.qemu, h.end

		By("the Sync's 20 s gRPC deadline passes while our launcher holds the start")
		var gaveUp time.Time
		Eventually(func() bool {
			for _, l := range handlerLines(s) {
				at, ok := stampOf(l)
				if ok && at.After(w.began) && strings.Contains(l, string(vmi.UID)) && strings.Contains(msgOf(l), "Synchronizing the VirtualMachineInstance failed") &&
					strings.Contains(l, "DeadlineExceeded") {
					gaveUp = at
					return true
				}
			}
			return false
		}).WithTimeout(time.Until(holdEnd)).WithPolling(200*time.Millisecond).Should(BeTrue(), "virt-handler's Sync of VMI %s failed on its deadline before the start's end; its log %s", name, handlerLog(s))

		By("the next sync finds the domain Shutoff/Unknown, as the launcher's defined-domain event left it, and deletes it; the delete waits for the start, then virt-handler's final cleanup runs")
		Eventually(func() []string {
			return handlerMsgs(s, vmi.UID, gaveUp, "VMI is in phase: Scheduled | Domain status: Shutoff, reason: Unknown")
		}).WithTimeout(5*time.Second).WithPolling(100*time.Millisecond).ShouldNot(BeEmpty(), "virt-handler's next sync of VMI %s", name)
		Eventually(func() []string { return handlerMsgs(s, vmi.UID, gaveUp, "Signaled deletion") }).
			WithTimeout(5*time.Second).WithPolling(100*time.Millisecond).ShouldNot(BeEmpty(), "virt-handler's DeleteDomain of the starting domain")
		var cleanup time.Time
		Eventually(func() bool {
			cleanup = firstHandlerLine(s, gaveUp, "Performing final local cleanup for vmi with uid "+string(vmi.UID))
			return !cleanup.IsZero()
		}).WithTimeout(time.Until(holdEnd.Add(30*time.Second))).WithPolling(200*time.Millisecond).Should(BeTrue(), "virt-handler's final cleanup of VMI %s", name)
		Expect(cleanup).To(BeTemporally(">=", holdEnd.Add(-time.Second)), "the cleanup came once the delete returned, after the start's end")

		By("the guest runs on, its containerDisk unmounted and its notify pipe closed, and the VMI stays Scheduled")
		Consistently(func() string { return w.latestPhase() + fmt.Sprintf(" QEMU alive %v", qemu.Alive()) }).
			WithTimeout(20*time.Second).WithPolling(200*time.Millisecond).Should(Equal("Scheduled QEMU alive true"), "VMI %s after virt-handler's cleanup", name)
		Expect(handlerMsgs(s, vmi.UID, cleanup, "containerdisk scratch not yet ready")).NotTo(BeEmpty(), "virt-handler retrying the start with the containerDisk unmounted")
		Expect(w.vmiUIDs()).To(ConsistOf(vmi.UID), "VMIs named %s seen", name)
		Expect(w.podUIDs()).To(ConsistOf(pod.UID), "launcher pods of %s seen", name)
		Expect(qemuOf(ctx, s, pod, name)).To(Equal(qemu), "the QEMU of pod %s", pod.Name)

		row := fidelityRow("H3")
		AddReportEntry("cluster-virt-handler-slow-sync", fmt.Sprintf("%s, KubeVirt %s: QEMU %d of VMI %s held %v; the Sync failed %v after creation, the starting domain was deleted right after, the final cleanup %v after the start's end; the VMI still Scheduled with the guest running 20 s later; phases %v. Rule: %s",
			row.ID, kubevirtVersion(ctx), qemu.PID, name, hold, gaveUp.Sub(w.began).Round(100*time.Millisecond), cleanup.Sub(holdEnd).Round(100*time.Millisecond),
			compact(w.phasesSince(w.began)), row.Upstream))
	})
})

// heldStart is a VMI whose start our launcher holds (qemu-slow-start):
// its watch, pod, QEMU (up, paused) and when the hold ends at the latest
// (it began with the start call, before its QEMU was seen).
type heldStart struct {
	name string
	w    *vmiWatch
	vmi  *v1.VirtualMachineInstance
	pod  *k8sv1.Pod
	qemu clusterlite.NodeProcess
	end  time.Time
}

// startHeld creates a test-guest VMI named prefix-N whose start is held
// for hold, and waits until its QEMU runs.
func startHeld(ctx SpecContext, s *liteStack, kc kubecli.KubevirtClient, prefix string, hold time.Duration) heldStart {
	h := heldStart{name: fmt.Sprintf("%s-%d", prefix, time.Now().Unix()%100000)}
	h.w = watchVMI(kc, h.name)
	h.vmi = createNoNetVMIWith(ctx, kc, h.name, map[string]string{faults.AnnotationPrefix + "qemu-slow-start": "after=" + hold.String()})
	DeferCleanup(keepRestartLogs, s, h.name)
	h.pod = h.w.onlyPod()
	h.qemu = qemuOf(ctx, s, h.pod, h.name)
	h.end = time.Now().Add(hold)
	return h
}

// handlerMsgs lists the msg fields of virt-handler's log lines about the
// VMI uid stamped after since that contain one of words (all lines for
// none).
func handlerMsgs(s *liteStack, uid types.UID, since time.Time, words ...string) []string {
	var msgs []string
	for _, l := range handlerLines(s) {
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

// firstHandlerLine is the time of virt-handler's first log line stamped
// after since whose msg contains msg, or zero.
func firstHandlerLine(s *liteStack, since time.Time, msg string) time.Time {
	for _, l := range handlerLines(s) {
		if at, ok := stampOf(l); ok && at.After(since) && strings.Contains(msgOf(l), msg) {
			return at
		}
	}
	return time.Time{}
}

// handlerLines is virt-handler's log, every run of it, as lines.
func handlerLines(s *liteStack) []string {
	b, err := os.ReadFile(handlerLog(s))
	Expect(err).NotTo(HaveOccurred())
	return strings.Split(string(b), "\n")
}
