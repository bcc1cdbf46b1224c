package crashloop_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/crashloop"
	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// fast is the scale of scenarios that only need the loop to turn:
// retries after 0.1-0.15 s, 0.4-0.6, 0.9-1.35, ...; QEMU start timeouts of
// 2.4-3.6 s.
const fast = "0.01"

var _ = Describe("scenario 2: stop in the middle of a crash loop", Label("stop"), func() {
	DescribeTable("stops, launches nothing more, and starts again from a clean record",
		func(strategy string) {
			w := newWorkspace()
			p := w.run(2, []string{"--time-scale", "0.02"}, w.write(vm{name: "crashy", strategy: strategy, failFast: true}))
			Eventually(func() int { return len(p.Events(controller.EventBackoffPlanned, "crashy")) }, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 3))
			planned := p.Events(controller.EventBackoffPlanned, "crashy")[2]
			Expect(planned.RetryAfter).NotTo(BeNil())

			_, errs, code := cli("stop", "crashy", "--state-dir", w.state)
			Expect(code).To(Equal(0), errs)
			s := w.status("crashy")
			Expect(s.Status.StartFailure).To(BeNil(), "stop clears the record")
			Expect(s.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusStopped))

			// Watch for longer than the retry that was planned would have taken.
			window := time.Until(*planned.RetryAfter) + time.Duration(planned.ScaledDelayNs) + time.Second
			launched := w.launches("crashy")
			Consistently(func() int { return w.launches("crashy") }, window, 50*time.Millisecond).Should(Equal(launched))
			report("scenario 2 "+strategy, "stopped at count %d; no launch during %s (planned retry was %s after the failure)",
				planned.FailCount, window.Round(time.Millisecond), time.Duration(planned.ScaledDelayNs))

			startedBefore := len(p.Events(controller.EventStarted, "crashy"))
			_, errs, code = cli("start", "crashy", "--state-dir", w.state)
			Expect(code).To(Equal(0), errs)
			Eventually(func() int { return len(p.Events(controller.EventBackoffPlanned, "crashy")) }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 4))
			Expect(len(p.Events(controller.EventStarted, "crashy"))).To(BeNumerically(">", startedBefore))
			Expect(p.Events(controller.EventBackoffPlanned, "crashy")[3].FailCount).To(Equal(1), "the new loop counts from 1")
		},
		Entry("Always", "Always"),
		Entry("RerunOnFailure", "RerunOnFailure"),
	)
})

var _ = Describe("scenario 3: QEMU start timeout", Label("qemu-timeout"), Serial, func() {
	// timeoutRuns reads each attempt's timeout from both sides.
	timeoutRuns := func(w *workspace, p *proc, name string, attempts int) []crashloop.TimeoutRun {
		var out []crashloop.TimeoutRun
		started := p.Events(controller.EventStarted, name)
		for a := 1; a <= attempts; a++ {
			evs := w.launcherEvents(name, a)
			sched, ok := findEvent(evs, launcherapi.EventScheduled)
			Expect(ok).To(BeTrue(), "attempt %d has a Scheduled event", a)
			failed, ok := findEvent(evs, launcherapi.EventFailed)
			Expect(ok).To(BeTrue(), "attempt %d has a Failed event", a)
			Expect(sched.Scheduled).NotTo(BeNil())
			drawn, err := sched.Scheduled.StartTimeout()
			Expect(err).NotTo(HaveOccurred())
			passed, err := time.ParseDuration(started[a-1].QEMUTimeout)
			Expect(err).NotTo(HaveOccurred())
			out = append(out, crashloop.TimeoutRun{Passed: passed, Drawn: drawn, ScheduledAt: sched.Time, Failed: failed.Time, Reason: failed.Reason})
		}
		return out
	}

	It("fails inside [base, base+jitter) of its drawn timeout, counts, and backs off", func() {
		w := newWorkspace()
		p := w.run(3, []string{"--time-scale", fast}, w.write(vm{name: "hang", faults: map[string]string{"qemu-hang": ""}}))
		Eventually(func() int { return len(p.Events(controller.EventBackoffPlanned, "hang")) }, 60*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 2))
		Eventually(func() int { return len(p.Events(controller.EventStarted, "hang")) }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 3))
		s := w.status("hang")
		Expect(failCount(s)).To(BeNumerically(">=", 2))
		runs := timeoutRuns(w, p, "hang", 2)
		for i, r := range runs {
			Expect(crashloop.CheckTimeoutWindow(r, 240*time.Second, 120*time.Second, 0.01, time.Second)).To(Succeed(), "attempt %d", i+1)
			report("scenario 3 timeout", "attempt %d: drawn %s in [2.4s, 3.6s), failed %s after Scheduled",
				i+1, r.Drawn, r.Failed.Sub(r.ScheduledAt).Round(time.Millisecond))
		}
		Expect(runs[0].Drawn).NotTo(Equal(runs[1].Drawn), "each attempt draws its own timeout (seed 3)")
		for _, e := range p.Events(controller.EventExited, "hang")[:2] {
			Expect(e.Reason).To(Equal("QemuStartTimeout"))
			Expect(*e.ExitCode).To(Equal(10))
		}
		Expect(crashloop.CheckEnvelope(crashloop.Retries(p.Events("", "hang")), 0.01, slack)).To(Succeed())
		p.Terminate()
		w.saveTimeline("scenario3-qemu-hang", "scenario 3: QEMU never runs; jittered start timeout, counted and backed off", p)
	})

	It("catches a launcher that ignores the drawn window (negative control: --launcher-arg=--qemu-timeout=1s)", Label("negative-control"), func() {
		w := newWorkspace()
		// The launcher's own flags, from the contract: a fixed 1 s timeout.
		var ignore []string
		for _, f := range (launcherapi.Args{StartTimeout: launcherapi.FixedStartTimeout(time.Second)}).Build() {
			ignore = append(ignore, "--launcher-arg="+f)
		}
		p := w.run(3, append([]string{"--time-scale", fast}, ignore...),
			w.write(vm{name: "hang", faults: map[string]string{"qemu-hang": ""}}))
		Eventually(func() int { return len(p.Events(controller.EventBackoffPlanned, "hang")) }, 60*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 1))
		p.Terminate()
		err := crashloop.CheckTimeoutWindow(timeoutRuns(w, p, "hang", 1)[0], 240*time.Second, 120*time.Second, 0.01, time.Second)
		Expect(err).To(HaveOccurred())
		report("scenario 3 negative control", "%v", err)
	})
})

var _ = Describe("scenario 4: which failures count", Label("running-rule"), Serial, func() {
	kills := func() []vm {
		return []vm{
			{name: "kill-running", faults: map[string]string{"qemu-kill": "after=1s,attempts=1"}},
			{name: "panic", faults: map[string]string{"guest-panic": "after=0s,attempts=1"}},
		}
	}
	// secondStart waits until the VM's second attempt has started and
	// returns the events up to then.
	waitSecond := func(p *proc, name string) {
		Eventually(func() int { return len(p.Events(controller.EventStarted, name)) }, 120*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 2),
			func() string { return p.Stderr() })
	}
	exitOf := func(p *proc, name string) controller.Event {
		ex := p.Events(controller.EventExited, name)
		Expect(ex).NotTo(BeEmpty())
		return ex[0]
	}

	It("counts QEMU killed before Running, not QEMU killed or a guest panic after Running (upstream rule)", func() {
		w := newWorkspace()
		vms := append(kills(), vm{name: "kill-early", faults: map[string]string{"qemu-hang": "attempts=1", "qemu-kill": "after=500ms,attempts=1"}})
		var files []string
		for _, v := range vms {
			files = append(files, w.write(v))
		}
		p := w.run(4, []string{"--time-scale", fast, "--qemu-timeout", bootTimeout}, files...)
		for _, v := range vms {
			waitSecond(p, v.name)
		}
		p.Terminate()

		early := exitOf(p, "kill-early")
		Expect(early.Reason).To(Equal("QemuFailed"))
		Expect(early.FailCount).To(Equal(1), "a VMI that never ran counts")
		Expect(p.Events(controller.EventBackoffPlanned, "kill-early")).NotTo(BeEmpty())

		for name, reason := range map[string]string{"kill-running": "VMCrashed", "panic": "GuestPanicked"} {
			Expect(p.Events(controller.EventRunning, name)).NotTo(BeEmpty(), name)
			e := exitOf(p, name)
			Expect(e.Reason).To(Equal(reason), name)
			Expect(e.FailCount).To(Equal(0), "%s: a VMI that reached Running does not count upstream", name)
			Expect(p.Events(controller.EventBackoffPlanned, name)).To(BeEmpty(), name)
			second := p.Events(controller.EventStarted, name)[1]
			Expect(second.PlannedAt).To(BeNil(), "%s restarts at once, with no backoff", name)
			report("scenario 4 upstream", "%s: %s after Running, count %d, restarted %s later", name, reason, e.FailCount, second.Time.Sub(e.Time).Round(time.Millisecond))
		}
		w.saveTimeline("scenario4-upstream-rule", "scenario 4: failures before and after Running, upstream rule", p)
	})

	It("counts QEMU killed and a guest panic after Running with --count-running-failures-within", func() {
		w := newWorkspace()
		var files []string
		for _, v := range kills() {
			files = append(files, w.write(v))
		}
		p := w.run(4, []string{"--time-scale", fast, "--qemu-timeout", bootTimeout, "--count-running-failures-within", "100m"}, files...)
		for _, v := range kills() {
			waitSecond(p, v.name)
		}
		p.Terminate()
		for name, reason := range map[string]string{"kill-running": "VMCrashed", "panic": "GuestPanicked"} {
			e := exitOf(p, name)
			Expect(e.Reason).To(Equal(reason), name)
			Expect(e.FailCount).To(Equal(1), "%s: ended within 100m (scaled: 60s) of Running, so it counts", name)
			plans := p.Events(controller.EventBackoffPlanned, name)
			Expect(plans).NotTo(BeEmpty(), name)
			Expect(p.Events(controller.EventStarted, name)[1].PlannedAt).NotTo(BeNil(), "%s waited out a backoff", name)
			report("scenario 4 option", "%s: %s after Running counted, backoff %s", name, reason, plans[0].ScaledDelay)
		}
		w.saveTimeline("scenario4-count-running-failures", "scenario 4: --count-running-failures-within 100m", p)
	})
})

var _ = Describe("scenario 5: disk I/O errors", Label("disk"), Serial, func() {
	It("shows the guest's read errors on its console and keeps the VMI Running, as the catalog promises", func() {
		w := newWorkspace()
		p := w.run(5, []string{"--time-scale", fast, "--qemu-timeout", bootTimeout}, w.write(vm{name: "disk", faults: map[string]string{"disk-io-error": ""}}))
		Eventually(func() string { return w.console("disk", 1) }, 120*time.Second, 200*time.Millisecond).
			Should(ContainSubstring("HARNESS-DISK-READ-ERROR"), func() string { return p.Stderr() })
		s := w.status("disk")
		Expect(s.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusRunning))
		Expect(failCount(s)).To(Equal(0))
		Expect(w.firedFaults("disk", 1)).To(Equal("disk-io-error"))
		Consistently(func() int { return w.launches("disk") }, 2*time.Second, 100*time.Millisecond).Should(Equal(1))
		Expect(p.Events(controller.EventExited, "disk")).To(BeEmpty(), "the VMI keeps running")
		for _, line := range strings.Split(w.console("disk", 1), "\n") {
			if strings.Contains(line, "HARNESS-DISK") || strings.Contains(line, "I/O error") {
				report("scenario 5 console", "%s", strings.TrimSpace(line))
				break
			}
		}
	})
})

var _ = Describe("scenario 6: a count-limited fault", Label("count-limited"), Serial, func() {
	It("fails N times and recovers by itself on attempt N+1", func() {
		w := newWorkspace()
		p := w.run(6, []string{"--time-scale", fast, "--qemu-timeout", bootTimeout},
			w.write(vm{name: "twice", faults: map[string]string{"libvirt-error": "2*at=define"}}))
		Eventually(func(g Gomega) {
			s := w.status("twice")
			g.Expect(s.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusRunning))
			g.Expect(s.Status.StartFailure).To(BeNil())
		}, 90*time.Second, 100*time.Millisecond).Should(Succeed(), func() string { return p.Stderr() })
		Consistently(func() int { return w.launches("twice") }, 2*time.Second, 100*time.Millisecond).Should(Equal(3))
		var reasons []string
		for _, e := range p.Events(controller.EventExited, "twice") {
			reasons = append(reasons, e.Reason)
		}
		Expect(reasons).To(Equal([]string{"LibvirtError", "LibvirtError"}))
		Expect([]string{w.firedFaults("twice", 1), w.firedFaults("twice", 2), w.firedFaults("twice", 3)}).
			To(Equal([]string{"libvirt-error", "libvirt-error", ""}))
		Expect(p.Events(controller.EventRunning, "twice")[0].Attempt).To(Equal(3))
		Expect(crashloop.CheckEnvelope(crashloop.Retries(p.Events("", "twice")), 0.01, slack)).To(Succeed())
		p.Terminate()
		w.saveTimeline("scenario6-count-limited", "scenario 6: libvirt-error 2*at=define, recovery on attempt 3", p)
	})
})
