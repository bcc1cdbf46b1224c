package crashloop_test

import (
	"bufio"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/crashloop"
	"github.com/crashloop-harness/crashloop/functests/envelope"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// Scenario 1 runs KubeVirt's schedule 50 times faster: retries after
// 0.2-0.3 s, 0.8-1.2, 1.8-2.7, 3.2-4.8, then 5-6 s; 11-16.5 s for five
// failures and the recovery start, against 550-825 s upstream.
const envelopeScale = 0.02

// slack is what a retry may come later than its envelope allows: the
// controller's timer plus starting a process, on a busy 2-core machine.
const slack = 150 * time.Millisecond

// bootTimeout is an unscaled --qemu-timeout that leaves a booting guest
// plenty of time at the lane's scales (60 s at 0.02).
const bootTimeout = "3000s"

var _ = Describe("scenario 1: a fail-fast crash loop under runStrategy Always", Label("envelope"), Serial, func() {
	It("counts 1..5 inside KubeVirt's scaled envelope, then recovers to Running when the fault is removed", func() {
		w := newWorkspace()
		spec := vm{name: "crashy", failFast: true}
		m := w.write(spec)
		ctlTimeline := filepath.Join(w.dir, "controller-timeline")
		p := w.run(1, []string{"--time-scale", "0.02", "--qemu-timeout", bootTimeout, "--timeline", ctlTimeline}, m)

		By("the count growing 1..5 in CrashLoopBackOff")
		Eventually(func() int { return len(p.Events(controller.EventBackoffPlanned, "crashy")) }, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 5))
		vm5 := w.status("crashy")
		Expect(failCount(vm5)).To(Equal(5))
		Expect(vm5.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusCrashLoopBackOff))

		By("removing the fault annotation from the manifest while the fifth wait runs")
		spec.failFast = false
		w.write(spec)

		By("the VM reaching Running with startFailure cleared")
		Eventually(func(g Gomega) {
			s := w.status("crashy")
			g.Expect(s.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusRunning))
			g.Expect(s.Status.StartFailure).To(BeNil())
		}, 60*time.Second, 50*time.Millisecond).Should(Succeed(), func() string { return p.Stderr() })
		wall := time.Since(p.Started)
		report("scenario 1 wall time", "%s for 5 failures and recovery to Running (KubeVirt's real schedule: at least 550 s)", wall.Round(10*time.Millisecond))
		Expect(wall).To(BeNumerically("<", 60*time.Second))

		var counts []int
		for _, e := range p.Events(controller.EventBackoffPlanned, "crashy") {
			counts = append(counts, e.FailCount)
		}
		Expect(counts).To(Equal([]int{1, 2, 3, 4, 5}))
		Expect(p.Events(controller.EventManifestChanged, "crashy")).To(HaveLen(1))
		Expect(p.Events(controller.EventRunning, "crashy")).To(HaveLen(1))
		Expect(p.Events(controller.EventRunning, "crashy")[0].Attempt).To(Equal(6), "the first attempt after the edit starts clean")

		By("every observed delay lying inside KubeVirt's envelope for its count")
		retries := crashloop.Retries(p.Events("", "crashy"))
		Expect(retries).To(HaveLen(5))
		for _, r := range retries {
			Expect(r.StartedAt.IsZero()).To(BeFalse(), "retry after failure %d happened", r.Count)
		}
		Expect(crashloop.CheckEnvelope(retries, envelopeScale, slack)).To(Succeed())
		for _, r := range retries {
			lo, hi := envelope.Bounds(r.Count, envelopeScale)
			report("scenario 1 delay", "failure %d: planned %s observed %s envelope [%s, %s]", r.Count, r.Planned, r.Observed().Round(time.Millisecond), lo, hi)
		}
		w.saveTimeline("scenario1-failfast-always", "scenario 1: fail-fast crash loop, Always, recovery by removing the annotation", p)

		By("virt-controller --timeline having written the same run")
		p.Terminate()
		Expect(countLines(ctlTimeline+".jsonl")).To(Equal(1+6), "a header and one line per attempt")
		svg, err := os.ReadFile(ctlTimeline + ".svg")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(svg)).To(ContainSubstring("<svg"))
	})

	It("rejects another backoff preset (negative control: --backoff kubelet)", Label("negative-control"), func() {
		w := newWorkspace()
		p := w.run(1, []string{"--time-scale", "0.02", "--backoff", "kubelet"}, w.write(vm{name: "crashy", failFast: true}))
		Eventually(func() int {
			n := 0
			for _, r := range crashloop.Retries(p.Events("", "crashy")) {
				if !r.StartedAt.IsZero() {
					n++
				}
			}
			return n
		}, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 3))
		p.Terminate()
		err := crashloop.CheckEnvelope(crashloop.Retries(p.Events("", "crashy")), envelopeScale, slack)
		Expect(err).To(HaveOccurred(), "kubelet's 10 s doubling must fall outside KubeVirt's envelope")
		Expect(err.Error()).To(ContainSubstring("failure 2"))
		report("scenario 1 negative control", "%v", err)
		w.saveTimeline("scenario1-negative-kubelet", "negative control: --backoff kubelet against KubeVirt's envelope", p)
	})
})

func countLines(path string) int {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
	}
	return n
}
