package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/vmops"
)

// opsScale leaves the second backoff 4-6 s long: time for a few CLI calls
// inside it.
const opsScale = "0.1"

var _ = Describe("virt-controller manual operations during a crash loop, as KubeVirt v1.6.0", Label("controller", "fidelity"), func() {
	var w *workspace
	BeforeEach(func() { w = newWorkspace() })

	// inBackoff waits for a fail-fast VM's second counted failure with at
	// least 1.5 s of its backoff left, and returns its status then.
	inBackoff := func(name string) *v1.VirtualMachine {
		var vm *v1.VirtualMachine
		Eventually(func(g Gomega) {
			vm = w.status(name)
			g.Expect(failCount(vm)).To(BeNumerically(">=", 2))
			g.Expect(vm.Status.StartFailure.RetryAfterTimestamp).NotTo(BeNil())
			g.Expect(time.Until(vm.Status.StartFailure.RetryAfterTimestamp.Time)).To(BeNumerically(">", 1500*time.Millisecond))
		}, 60*time.Second, 20*time.Millisecond).Should(Succeed())
		return vm
	}
	unchanged := func(name string, before *v1.VirtualMachine, what string) {
		after := w.status(name)
		Expect(after.Status.StartFailure).NotTo(BeNil(), what)
		Expect(after.Status.StartFailure.ConsecutiveFailCount).To(Equal(before.Status.StartFailure.ConsecutiveFailCount), what)
		Expect(after.Status.StartFailure.RetryAfterTimestamp.Equal(before.Status.StartFailure.RetryAfterTimestamp)).To(BeTrue(), what)
		Expect(after.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusCrashLoopBackOff), what)
	}
	stoppedForGood := func(name string) {
		vm := w.status(name)
		Expect(vm.Status.StartFailure).To(BeNil(), "stop clears the record")
		Expect(vm.Status.StateChangeRequests).To(BeEmpty())
		Expect(*vm.Spec.RunStrategy).To(Equal(v1.RunStrategyHalted))
		Expect(vm.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusStopped))
		launched := len(w.launchDirs(name))
		// Longer than the backoff that was running (at most 6 s).
		Consistently(func() int { return len(w.launchDirs(name)) }, 7*time.Second, 100*time.Millisecond).Should(Equal(launched))
	}

	It("refuses start and restart of an Always VM in backoff with upstream's words, and stops it", func() {
		m := w.write("crashy.yaml", vmSpec{name: "crashy", strategy: "Always", failFast: true}.manifest())
		w.startController([]string{"--time-scale", opsScale}, m)
		before := inBackoff("crashy")

		_, errs, code := cli("start", "crashy", "--state-dir", w.state)
		Expect(code).To(Equal(1), "start refused: %s", errs)
		Expect(errs).To(ContainSubstring(vmops.Ours().Start(before, nil, nil).Message))
		Expect(errs).To(ContainSubstring("Always does not support manual start requests"))
		unchanged("crashy", before, "after the refused start")

		_, errs, code = cli("restart", "crashy", "--state-dir", w.state)
		Expect(code).To(Equal(1), "restart refused: %s", errs)
		Expect(errs).To(ContainSubstring("VM is not running"))
		unchanged("crashy", before, "after the refused restart")

		_, errs, code = cli("stop", "crashy", "--state-dir", w.state)
		Expect(code).To(Equal(0), errs)
		stoppedForGood("crashy")
	})

	It("shows RerunOnFailure's pending Start during the backoff, refuses start, and stops it (our deviation)", func() {
		m := w.write("rerun.yaml", vmSpec{name: "rerun", strategy: "RerunOnFailure", failFast: true}.manifest())
		w.startController([]string{"--time-scale", opsScale}, m)
		before := inBackoff("rerun")
		Expect(before.Status.StateChangeRequests).To(Equal([]v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}),
			"upstream keeps {action: Start} for the whole backoff")
		Expect(before.Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusCrashLoopBackOff))
		Expect(before.Status.Created).To(BeFalse(), "the failed VMI is deleted")

		_, errs, code := cli("start", "rerun", "--state-dir", w.state)
		Expect(code).To(Equal(1), "start refused: %s", errs)
		Expect(errs).To(ContainSubstring(vmops.MsgUnderway))
		unchanged("rerun", before, "after the refused start")

		_, errs, code = cli("stop", "rerun", "--state-dir", w.state)
		Expect(code).To(Equal(0), "upstream answers 409 here; ours keeps the crash-loop change's promise: %s", errs)
		stoppedForGood("rerun")
	})
})
