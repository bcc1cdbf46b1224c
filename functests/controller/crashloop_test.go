package controller_test

import (
	"os"
	"path/filepath"
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// scale compresses KubeVirt's schedule 100 times: retries after 0.10-0.15 s,
// 0.4-0.6 s, 0.9-1.35 s, 1.6-2.4 s, 2.5-3 s, then every 3 s.
const scale = "0.01"

// bootTimeout is the unscaled --qemu-timeout for specs that boot the test
// guest: 30 s once scaled, plenty for TCG.
const bootTimeout = "3000s"

var _ = Describe("virt-controller crash loop", Label("controller"), func() {
	var w *workspace
	BeforeEach(func() { w = newWorkspace() })

	It("backs off a fail-fast VM under runStrategy Always by KubeVirt's scaled schedule", func() {
		m := w.write("crashy.yaml", vmSpec{name: "crashy", strategy: "Always", failFast: true}.manifest())
		p := w.startController([]string{"--time-scale", scale}, m)

		By("the failure count growing through CrashLoopBackOff")
		last := 0
		Eventually(func(g Gomega) {
			vm := w.status("crashy")
			g.Expect(failCount(vm)).To(BeNumerically(">=", last), "the count never goes down")
			last = failCount(vm)
			g.Expect(last).To(BeNumerically(">=", 4))
			g.Expect(vm.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusCrashLoopBackOff))
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed())

		By("each gap from a failure to the next launch matching the planned scaled delay")
		plans, starts := p.Events(controller.EventBackoffPlanned, ""), p.Events(controller.EventStarted, "")
		Expect(len(plans)).To(BeNumerically(">=", 4))
		Expect(len(starts)).To(BeNumerically(">=", 4))
		bounds := [][2]time.Duration{{100 * time.Millisecond, 150 * time.Millisecond}, {400 * time.Millisecond, 600 * time.Millisecond}, {900 * time.Millisecond, 1350 * time.Millisecond}}
		dirs := w.launchDirs("crashy")
		for i := range 3 {
			planned := time.Duration(plans[i].ScaledDelayNs)
			Expect(planned).To(BeNumerically(">=", bounds[i][0]), "failure %d", i+1)
			Expect(planned).To(BeNumerically("<=", bounds[i][1]), "failure %d", i+1)
			Expect(plans[i].FailCount).To(Equal(i + 1))
			Expect(plans[i].Seed).To(BeEquivalentTo(4242))
			Expect(plans[i].TimeScale).To(Equal(0.01))

			// As the controller saw it: the failure time the delay was
			// counted from, the retry time it planned, the start it made.
			Expect(plans[i].RetryAfter).NotTo(BeNil(), "failure %d", i+1)
			Expect(plans[i].RetryAfter.Sub(plans[i].Time)).To(Equal(planned), "failure %d", i+1)
			Expect(starts[i+1].PlannedAt).NotTo(BeNil(), "start %d", i+2)
			Expect(starts[i+1].PlannedAt.Equal(*plans[i].RetryAfter)).To(BeTrue(), "start %d waited for %v, planned %v", i+2, starts[i+1].PlannedAt, plans[i].RetryAfter)
			gap := starts[i+1].Time.Sub(plans[i].Time)
			GinkgoWriter.Printf("failure %d: planned %v, controller gap %v\n", i+1, planned, gap)
			Expect(gap).To(BeNumerically(">=", planned), "failure %d", i+1)
			Expect(gap).To(BeNumerically("<", planned+50*time.Millisecond), "failure %d", i+1)

			// As the launchers saw it: the crashed launcher's last write to
			// its log, and the next launcher's first log line.
			crashed := mtime(filepath.Join(dirs[i+1], "launcher.log"))
			next := firstLogTime(filepath.Join(dirs[i+2], "launcher.log"))
			outside := next.Sub(crashed)
			GinkgoWriter.Printf("failure %d: seen by the launchers %v\n", i+1, outside)
			Expect(outside).To(BeNumerically(">", planned-20*time.Millisecond), "failure %d seen by the launchers", i+1)
			// The launchers' view also holds the crashed launcher's exit,
			// the controller noticing it, and a new process starting up to
			// its first log line (40-70 ms here on a quiet machine). The
			// slack stays under the distance between two steps of the
			// scaled schedule (150 ms + 250 ms = the next step's 400 ms).
			Expect(outside).To(BeNumerically("<", planned+250*time.Millisecond), "failure %d seen by the launchers", i+1)
		}
		exited := p.Events(controller.EventExited, "")[0]
		Expect(exited.Reason).To(Equal("LauncherCrashed"))
		Expect(*exited.ExitCode).To(Equal(2), "the fail-fast launcher panics: exit code 2")
	})

	It("ends the loop on stop, with no live VMI, and clears the record", func() {
		m := w.write("crashy.yaml", vmSpec{name: "crashy", strategy: "Always", failFast: true}.manifest())
		w.startController([]string{"--time-scale", scale}, m)
		Eventually(func() int { return failCount(w.status("crashy")) }, 30*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 3))

		_, errs, code := cli("stop", "crashy", "--state-dir", w.state)
		Expect(code).To(Equal(0), errs)
		vm := w.status("crashy")
		Expect(vm.Status.StartFailure).To(BeNil())
		Expect(vm.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusStopped))
		Expect(*vm.Spec.RunStrategy).To(Equal(v1.RunStrategyHalted))
		launched := len(w.launchDirs("crashy"))
		Consistently(func() int { return len(w.launchDirs("crashy")) }, 4*time.Second, 100*time.Millisecond).Should(Equal(launched))
	})

	It("recovers to Running with startFailure cleared when the fault annotation is removed", func() {
		requireImages()
		spec := vmSpec{name: "crashy", strategy: "Always", failFast: true}
		m := w.write("crashy.yaml", spec.manifest())
		p := w.startController([]string{"--time-scale", scale, "--qemu-timeout", bootTimeout}, m)
		Eventually(func() int { return failCount(w.status("crashy")) }, 30*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 2))

		spec.failFast = false
		w.write("crashy.yaml", spec.manifest())
		Eventually(func() v1.VirtualMachinePrintableStatus { return w.status("crashy").Status.PrintableStatus },
			120*time.Second, 200*time.Millisecond).Should(Equal(v1.VirtualMachineStatusRunning), func() string { return p.Stderr() })
		vm := w.status("crashy")
		Expect(vm.Status.StartFailure).To(BeNil())
		Expect(vm.Generation).To(BeEquivalentTo(2))
		Expect(p.Events(controller.EventManifestChanged, "")).To(HaveLen(1))
		Expect(p.Events(controller.EventRecordCleared, "")).NotTo(BeEmpty())
	})

	It("keeps the count and the retry time across kill -9 of the controller", func() {
		m := w.write("crashy.yaml", vmSpec{name: "crashy", strategy: "Always", failFast: true}.manifest())
		p := w.startController([]string{"--time-scale", scale}, m)
		Eventually(func(g Gomega) {
			vm := w.status("crashy")
			g.Expect(failCount(vm)).To(BeNumerically(">=", 4))
			g.Expect(vm.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusCrashLoopBackOff))
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
		p.Kill9()

		rec := w.record("crashy")
		count, retry, attempts := failCount(rec.VM), *rec.RetryAfter, rec.Attempt
		Expect(retry).To(BeTemporally(">", time.Now()), "killed while waiting for the retry")

		p2 := w.startController([]string{"--time-scale", scale}, m)
		vm := w.status("crashy")
		Expect(failCount(vm)).To(Equal(count), "the count is not forgotten")
		Expect(vm.Status.StartFailure.RetryAfterTimestamp.Time).To(BeTemporally("~", retry, time.Second))

		Eventually(func() int { return len(p2.Events(controller.EventStarted, "")) }, 20*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 1))
		first := p2.Events(controller.EventStarted, "")[0]
		Expect(first.Time).To(BeTemporally(">=", retry), "no early retry")
		Expect(first.Time).To(BeTemporally("<", retry.Add(200*time.Millisecond)))
		Expect(first.Attempt).To(Equal(attempts + 1))
		Eventually(func() int { return failCount(w.status("crashy")) }, 20*time.Second, 50*time.Millisecond).Should(Equal(count + 1))
	})

	It("adopts a running launcher after kill -9 of the controller, and stops it through the next one", func() {
		requireImages()
		m := w.write("steady.yaml", vmSpec{name: "steady", strategy: "Always"}.manifest())
		args := []string{"--time-scale", scale, "--qemu-timeout", bootTimeout}
		p := w.startController(args, m)
		Eventually(func() v1.VirtualMachinePrintableStatus { return w.status("steady").Status.PrintableStatus },
			120*time.Second, 200*time.Millisecond).Should(Equal(v1.VirtualMachineStatusRunning), func() string { return p.Stderr() })
		p.Kill9()
		launcher := w.record("steady").Launcher
		Expect(launcher).NotTo(BeNil())
		Expect(launcher.Alive()).To(BeTrue(), "the launcher outlives its controller, as a pod does")

		p2 := w.startController(args, m)
		Eventually(func() int { return len(p2.Events(controller.EventAdopted, "")) }, 10*time.Second, 20*time.Millisecond).Should(Equal(1))
		adopted := p2.Events(controller.EventAdopted, "")[0]
		Expect(adopted.PID).To(Equal(launcher.PID))
		Expect(adopted.Message).To(ContainSubstring("alive=true"))
		Expect(w.status("steady").Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusRunning))
		Expect(p2.Events(controller.EventStarted, "")).To(BeEmpty(), "no second launcher for the adopted VMI")

		_, errs, code := cli("stop", "steady", "--state-dir", w.state)
		Expect(code).To(Equal(0), errs)
		Eventually(launcher.Alive, 60*time.Second, 100*time.Millisecond).Should(BeFalse(), "the stop reaches the adopted launcher")
		Eventually(func() v1.VirtualMachinePrintableStatus { return w.status("steady").Status.PrintableStatus },
			10*time.Second, 100*time.Millisecond).Should(Equal(v1.VirtualMachineStatusStopped))
	})

	It("does not restart a VMI that Succeeded under RerunOnFailure", func() {
		requireImages()
		m := w.write("job.yaml", vmSpec{name: "job", strategy: "RerunOnFailure", kernelArgs: testguest.KernelArgs + " harness.poweroff=2"}.manifest())
		p := w.startController([]string{"--time-scale", scale, "--qemu-timeout", bootTimeout}, m)
		Eventually(func() []string {
			var phases []string
			for _, e := range p.Events("", "") {
				if e.VM == "default/job" && (e.Event == controller.EventRunning || e.Event == controller.EventSucceeded) {
					phases = append(phases, string(e.Event))
				}
			}
			return phases
		}, 120*time.Second, 200*time.Millisecond).Should(Equal([]string{"Running", "Succeeded"}), func() string { return p.Stderr() })
		Consistently(func() int { return len(w.launchDirs("job")) }, 5*time.Second, 200*time.Millisecond).Should(Equal(1))
		vm := w.status("job")
		Expect(vm.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusStopped))
		Expect(vm.Status.StartFailure).To(BeNil())
	})

	It("never starts Halted or Manual VMs by itself", func() {
		halted := w.write("halted.yaml", vmSpec{name: "halted", strategy: "Halted", failFast: true}.manifest())
		manual := w.write("manual.yaml", vmSpec{name: "manual", strategy: "Manual", failFast: true}.manifest())
		w.startController([]string{"--time-scale", scale}, halted, manual)
		Consistently(func() int { return len(w.launchDirs("halted")) + len(w.launchDirs("manual")) }, 4*time.Second, 100*time.Millisecond).Should(BeZero())
		for _, n := range []string{"halted", "manual"} {
			Expect(w.status(n).Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusStopped), n)
		}

		By("a manual start of the Manual VM launching once, without a crash loop")
		_, errs, code := cli("start", "manual", "--state-dir", w.state)
		Expect(code).To(Equal(0), errs)
		Eventually(func() int { return len(w.launchDirs("manual")) }, 5*time.Second).Should(Equal(1))
		Consistently(func() int { return len(w.launchDirs("manual")) }, 3*time.Second, 100*time.Millisecond).Should(Equal(1))
		vm := w.status("manual")
		Expect(vm.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusStopped))
		Expect(vm.Status.StartFailure).To(BeNil(), "Manual keeps no start-failure record")
	})
})

func mtime(path string) time.Time {
	st, err := os.Stat(path)
	Expect(err).NotTo(HaveOccurred())
	return st.ModTime()
}

// firstLogTime reads the time of a launcher's first slog line.
func firstLogTime(path string) time.Time {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`time=(\S+)`).FindSubmatch(data)
	Expect(m).NotTo(BeNil(), "no time= in %s: %s", path, data)
	t, err := time.Parse(time.RFC3339Nano, string(m[1]))
	Expect(err).NotTo(HaveOccurred())
	return t
}
