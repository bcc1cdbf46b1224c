package cluster_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// Row H4 of #21: the launcher's command socket unresponsive for longer
// than virt-handler's stale-socket watchdog allows. The watchdog
// (pkg/virt-handler/cache/domain-watcher.go) dials every launcher socket
// it has a ghost record of, every 11 s (half the 30 s timeout, rounded up
// once more); a socket that refused dials for more than 30 s gets a
// domain with a deletion timestamp pushed into virt-handler's domain
// informer and a permanent launcher-unresponsive marker beside it. Our
// launcher-socket-unresponsive fault stops the pod's command server (its
// listener and connections closed, the socket file kept), which is what
// the watchdog tests; the guest runs on. The watchdog is the same on
// KubeVirt's main; kubevirt/kubevirt#17752 (release-1.9) changed another
// path, a socket unreachable when the domain informer re-lists.
var _ = Describe("KubeVirt's virt-handler and a launcher whose command socket stops answering", Label("virt-handler"), Ordered, func() {
	var (
		s  *liteStack
		kc kubecli.KubevirtClient
	)
	BeforeAll(func(ctx SpecContext) { s, kc = virtHandlerStack(ctx) })

	It("fails a Running VMI whose socket refused dials past the 30 s watchdog, though its guest ran on and the socket answers again later (H4)", func(ctx SpecContext) {
		o := socketRow(ctx, s, kc, "vh-sock-long", 50*time.Second)
		Expect(o.marked.IsZero()).To(BeFalse(), "virt-handler's watchdog never marked the socket; VMI phases %v", o.phases)
		watchdog := o.marked.Sub(o.refused)
		Expect(watchdog).To(BeNumerically(">", 30*time.Second), "refusal → watchdog's warning")
		Expect(watchdog).To(BeNumerically("<", 50*time.Second), "refusal → watchdog's warning")
		Expect(o.failed.IsZero()).To(BeFalse(), "VMI never Failed; phases %v", o.phases)
		Expect(o.phases).To(Equal([]string{"Pending", "Scheduling", "Scheduled", "Running", "Failed"}), "VMI phases")
		Expect(o.markerFile).To(BeTrue(), "virt-handler's %s marker beside the socket", "launcher-unresponsive")
		Expect(o.qemuAliveAtFailure).To(BeTrue(), "the guest ran on until virt-handler failed its VMI")
		Expect(o.answers).To(BeTemporally(">", o.failed), "the socket answered again after the VMI's failure")
		Expect(o.phasesAfterAnswer).To(HaveEach("Failed"), "VMI phases seen from the socket's return to 5 s after it")
		row := fidelityRow("H4")
		AddReportEntry("cluster-virt-handler-socket-unresponsive", fmt.Sprintf("%s, KubeVirt %s: socket refused %v after Running; watchdog's warning %v after the refusal; VMI Failed %v after the refusal (%q); QEMU alive then: %v; phases %v. Rule: %s",
			row.ID, kubevirtVersion(ctx), o.refused.Sub(o.running).Round(100*time.Millisecond), watchdog.Round(100*time.Millisecond),
			o.failed.Sub(o.refused).Round(100*time.Millisecond), o.reason, o.qemuAliveAtFailure, o.phases, strings.TrimSpace(row.Upstream)))
	})

	It("leaves a Running VMI Running when its socket refuses dials for less than the watchdog's 30 s (the control for H4)", func(ctx SpecContext) {
		o := socketRow(ctx, s, kc, "vh-sock-short", 15*time.Second)
		Expect(o.marked.IsZero()).To(BeTrue(), "the watchdog marked a socket that refused for 15 s only, %v after", o.marked.Sub(o.refused))
		Expect(o.failed.IsZero()).To(BeTrue(), "VMI Failed; phases %v", o.phases)
		Expect(o.phases).To(Equal([]string{"Pending", "Scheduling", "Scheduled", "Running"}), "VMI phases")
		Expect(o.markerFile).To(BeFalse(), "no launcher-unresponsive marker")
		Expect(o.qemuAliveAtEnd).To(BeTrue(), "the guest runs, 35 s past the socket's return (50 s past the refusal, beyond the watchdog's latest 44 s)")
		Expect(o.phasesAfterAnswer).To(HaveEach("Running"), "VMI phases seen from the socket's return on")
		AddReportEntry("cluster-virt-handler-socket-short", fmt.Sprintf("control for H4, KubeVirt %s: socket refused for 15 s from %v after Running; VMI Running throughout, same QEMU, no watchdog warning",
			kubevirtVersion(ctx), o.refused.Sub(o.running).Round(100*time.Millisecond)))
	})
})

// socketObserved is what one H4 run saw.
type socketObserved struct {
	running, refused, answers, marked, failed time.Time
	reason                                    string
	// phases are the VMI's, compacted; phasesAfterAnswer those seen
	// from the socket's return to the end.
	phases, phasesAfterAnswer                      []string
	markerFile, qemuAliveAtFailure, qemuAliveAtEnd bool
}

// socketRow runs a test-guest VMI whose launcher's command socket refuses
// dials for hold, from 3 s after Running, and follows it until 35 s past
// the socket's return, or until 5 s past both the socket's return and the
// VMI's failure.
func socketRow(ctx SpecContext, s *liteStack, kc kubecli.KubevirtClient, prefix string, hold time.Duration) socketObserved {
	name := fmt.Sprintf("%s-%d", prefix, time.Now().Unix()%100000)
	w := watchVMI(kc, name)
	vmi := createNoNetVMIWith(ctx, kc, name, map[string]string{
		faults.AnnotationPrefix + "launcher-socket-unresponsive": "after=3s,for=" + hold.String()})
	DeferCleanup(keepRestartLogs, s, name)
	var o socketObserved
	o.running = w.await(v1.Running, 4*time.Minute, s)
	pod := w.onlyPod()
	qemu := qemuOf(ctx, s, pod, name)
	// The host's path of the socket is longer than a unix address may
	// be (108 bytes); the folder's descriptor names it in a few.
	dir, err := os.Open(podEmptyDir(s, pod, "sockets"))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(dir.Close)
	sockets := fmt.Sprintf("/proc/self/fd/%d", dir.Fd())
	sock := filepath.Join(sockets, "launcher-sock")
	Expect(dialSocket(sock)).To(Succeed(), "pod %s's command socket %s answers once Running", pod.Name, sock)

	By(fmt.Sprintf("the socket refuses dials from 3 s after Running, for %v; the guest runs on", hold))
	Eventually(func() error { return dialSocket(sock) }).WithTimeout(15*time.Second).WithPolling(50*time.Millisecond).
		Should(MatchError(syscall.ECONNREFUSED), "pod %s's command socket", pod.Name)
	o.refused = time.Now()
	_, err = os.Stat(sock)
	Expect(err).NotTo(HaveOccurred(), "the socket file stays while it refuses")

	until := o.refused.Add(hold + 35*time.Second)
	for time.Now().Before(until) {
		if o.answers.IsZero() && dialSocket(sock) == nil {
			o.answers = time.Now()
		}
		if p := w.latestPhase(); p == string(v1.Failed) && o.failed.IsZero() {
			o.failed = time.Now()
			o.qemuAliveAtFailure = qemu.Alive()
			if got, err := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{}); err == nil {
				o.reason = failureReason(got)
			}
		}
		if _, err := os.Stat(filepath.Join(sockets, "launcher-unresponsive")); err == nil {
			o.markerFile = true
		}
		if !o.failed.IsZero() && !o.answers.IsZero() && time.Since(o.answers) > 5*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if at := firstHandlerLine(s, o.refused, "detected unresponsive virt-launcher command socket"); !at.IsZero() {
		o.marked = at
	}
	o.phases = compact(w.phasesSince(w.began))
	o.qemuAliveAtEnd = qemu.Alive()
	if !o.answers.IsZero() {
		o.phasesAfterAnswer = append([]string{w.phaseAt(o.answers)}, w.phasesSince(o.answers)...)
	}
	fmt.Fprintf(GinkgoWriter, "VMI %s (UID %s): Running %v after creation; socket refused %v after Running; answers again %v after the refusal; watchdog warning %v after it; Failed %v after it (%q), QEMU alive then %v, at the end %v; marker %v; phases %v, from the socket's return %v\nvirt-handler about it since the refusal:\n%s\n",
		name, vmi.UID, o.running.Sub(w.began).Round(100*time.Millisecond), o.refused.Sub(o.running).Round(100*time.Millisecond),
		sinceOrNever(o.answers, o.refused), sinceOrNever(o.marked, o.refused), sinceOrNever(o.failed, o.refused), o.reason, o.qemuAliveAtFailure, o.qemuAliveAtEnd,
		o.markerFile, o.phases, o.phasesAfterAnswer, strings.Join(handlerMsgs(s, vmi.UID, o.refused), "\n"))
	return o
}

// podEmptyDir is the host's folder of a launcher pod's emptyDir, where
// the agent in kubelet's role makes it.
func podEmptyDir(s *liteStack, pod *k8sv1.Pod, volume string) string {
	return filepath.Join(s.stateDir, "nodens", "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", volume)
}

// dialSocket is the watchdog's test: a plain unix dial, nil when
// something listens.
func dialSocket(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func sinceOrNever(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(from).Round(100 * time.Millisecond).String()
}

// failureReason is the VMI's Ready condition's reason and message, where
// virt-handler says why it failed it.
func failureReason(vmi *v1.VirtualMachineInstance) string {
	var parts []string
	for _, c := range vmi.Status.Conditions {
		if c.Status != k8sv1.ConditionTrue && (c.Reason != "" || c.Message != "") {
			parts = append(parts, string(c.Type)+": "+c.Reason+" "+c.Message)
		}
	}
	return strings.Join(parts, "; ")
}
