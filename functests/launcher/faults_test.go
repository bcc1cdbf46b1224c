package launcher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// covered lists the catalog faults that this file exercises; a spec
// checks it against the catalog so that a new fault needs a test.
var covered = []string{"launcher-crash", "libvirt-error", "qemu-hang", "qemu-slow-start", "qemu-kill",
	"qemu-bad-config", "guest-panic", "guest-poweroff", "guest-noready", "disk-io-error", "launcher-socket-unresponsive"}

// expectFinal checks the final event and the exit code.
func expectFinal(r *Run, phase, reason string, code int) launcherapi.Event {
	name := launcherapi.EventFailed
	if phase == launcherapi.PhaseSucceeded {
		name = launcherapi.EventSucceeded
	}
	end := r.WaitFor(name, 90*time.Second)
	p, rs, c := final(end)
	Expect([]any{p, rs, c}).To(Equal([]any{phase, reason, code}), "final event: %+v", end)
	Expect(r.Exit(20 * time.Second)).To(Equal(code))
	return end
}

// firedEvent is fault's FaultFired event, if the launch wrote one.
func firedEvent(r *Run, fault string) (launcherapi.Event, bool) {
	for _, e := range r.Events() {
		if e.Event == launcherapi.EventFaultFired && e.Fault == fault {
			return e, true
		}
	}
	return launcherapi.Event{}, false
}

func fired(r *Run, fault string) launcherapi.Event {
	e, ok := firedEvent(r, fault)
	if !ok {
		Fail("no FaultFired event for " + fault)
	}
	return e
}

var _ = Describe("the fault catalog", func() {
	It("has a functional test for every fault", func() {
		names := faults.Names()
		sort.Strings(names)
		got := slices.Clone(covered)
		sort.Strings(got)
		Expect(got).To(Equal(names))
	})

	DescribeTable("launcher-crash kills the launcher for real at its point and leaves nothing behind",
		func(at string, wait string) {
			r := Start(VMISpec{}, "--fault", "launcher-crash=at="+at)
			if wait != "" {
				r.WaitFor(wait, 60*time.Second)
			}
			Expect(r.Exit(60 * time.Second)).To(Equal(2))
			_, failed := r.Find(launcherapi.EventFailed)
			_, succeeded := r.Find(launcherapi.EventSucceeded)
			Expect(failed || succeeded).To(BeFalse(), "a crashed launcher writes no final event")
			Expect(fired(r, "launcher-crash").Fired.At).To(Equal(at))
			Expect(r.Log()).To(ContainSubstring("Simulated virt-launcher crash"))
			Eventually(r.RuntimeEntries).WithTimeout(5*time.Second).Should(BeEmpty(), "the reaper removes the libvirt state")
		},
		Entry("before libvirt", "before-libvirt", ""),
		Entry("before define", "before-define", ""),
		Entry("before start", "before-start", ""),
		Entry("after Running (QEMU is left to the reaper)", "after-running", launcherapi.EventRunning),
	)

	DescribeTable("libvirt-error fails the libvirt call",
		func(at string) {
			r := Start(VMISpec{}, "--fault", "libvirt-error=at="+at)
			end := expectFinal(r, "Failed", "LibvirtError", 11)
			Expect(end.Message).To(ContainSubstring("injected libvirt error"))
			_, ran := r.Find(launcherapi.EventRunning)
			Expect(ran).To(BeFalse())
		},
		Entry("at define", "define"),
		Entry("at start", "start"),
	)

	It("qemu-hang: QEMU stays paused until the start timeout", func() {
		r := Start(VMISpec{}, "--qemu-timeout", "2s", "--qemu-timeout-jitter", "0s", "--fault", "qemu-hang")
		end := expectFinal(r, "Failed", "QemuStartTimeout", 10)
		sched, _ := r.Find(launcherapi.EventScheduled)
		Expect(end.Time.Sub(sched.Time)).To(BeNumerically(">=", 2*time.Second))
		fired(r, "qemu-hang")
	})

	It("qemu-slow-start inside the timeout: Running after the delay", func() {
		r := Start(VMISpec{KernelArgs: "harness.poweroff=0"}, "--qemu-timeout", "30s", "--fault", "qemu-slow-start=after=2s")
		sched := r.Next(10 * time.Second)
		running := r.WaitFor(launcherapi.EventRunning, 30*time.Second)
		Expect(running.Time.Sub(sched.Time)).To(BeNumerically(">=", 2*time.Second))
		expectFinal(r, "Succeeded", "GuestShutdown", 0)
	})

	It("qemu-slow-start outside the timeout: QemuStartTimeout", func() {
		r := Start(VMISpec{}, "--qemu-timeout", "2s", "--qemu-timeout-jitter", "0s", "--fault", "qemu-slow-start=after=30s")
		expectFinal(r, "Failed", "QemuStartTimeout", 10)
	})

	It("qemu-kill before Running: QemuFailed, exit 12", func() {
		r := Start(VMISpec{}, "--qemu-timeout", "60s", "--fault", "qemu-hang", "--fault", "qemu-kill=after=1s")
		end := expectFinal(r, "Failed", "QemuFailed", 12)
		Expect(end.Message).To(ContainSubstring("killed by SIGKILL before the domain was running"))
	})

	DescribeTable("qemu-kill after Running: VMCrashed, exit 13",
		func(signal string) {
			r := Start(VMISpec{}, "--fault", "qemu-kill=after=2s,signal="+signal)
			r.WaitFor(launcherapi.EventRunning, 60*time.Second)
			end := expectFinal(r, "Failed", "VMCrashed", 13)
			Expect(end.Message).To(ContainSubstring("killed by " + signal + " after the domain was running"))
			kill := fired(r, "qemu-kill")
			Expect(end.Time.Sub(kill.Time)).To(BeNumerically("<", 2*time.Second), "QEMU's death noticed late")
		},
		Entry("SIGKILL", "SIGKILL"),
		Entry("SIGTERM", "SIGTERM"),
		Entry("SIGSEGV", "SIGSEGV"),
	)

	It("qemu-bad-config: QEMU refuses a kernel that does not exist", func() {
		r := Start(VMISpec{}, "--fault", "qemu-bad-config")
		end := expectFinal(r, "Failed", "QemuFailed", 12)
		Expect(end.Message).To(ContainSubstring(faults.BadKernelPath))
		sched, _ := r.Find(launcherapi.EventScheduled)
		// A QEMU that exits at once must be seen at once (libvirt waits a
		// long time on a zombie left unreaped).
		Expect(end.Time.Sub(sched.Time)).To(BeNumerically("<", 10*time.Second))
	})

	It("guest-panic: the guest kernel panics, pvpanic tells libvirt", func() {
		r := Start(VMISpec{}, "--fault", "guest-panic=after=1s")
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		expectFinal(r, "Failed", "GuestPanicked", 13)
		r.ConsoleShows("HARNESS-PANIC-NOW", time.Second)
		r.ConsoleShows("Kernel panic", time.Second)
	})

	It("guest-poweroff: the guest powers itself off", func() {
		r := Start(VMISpec{}, "--fault", "guest-poweroff=after=1s")
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		expectFinal(r, "Succeeded", "GuestShutdown", 0)
		r.ConsoleShows("HARNESS-POWEROFF-NOW", time.Second)
	})

	It("guest-noready: Running, but the guest never reports ready", func() {
		r := Start(VMISpec{}, "--fault", "guest-noready")
		r.WaitFor(launcherapi.EventRunning, 60*time.Second)
		r.ConsoleShows("HARNESS-GUEST-NOREADY", 90*time.Second)
		r.Signal(syscall.SIGTERM)
		expectFinal(r, "Succeeded", "Stopped", 0)
		_, ready := r.Find(launcherapi.EventGuestReady)
		Expect(ready).To(BeFalse())
	})

	It("launcher-socket-unresponsive: the launcher alone has no command socket, so it notes the fault and runs the VMI as without it", func() {
		r := Start(VMISpec{}, "--fault", "launcher-socket-unresponsive=after=1s,for=1m", "--fault", "guest-poweroff=after=1s")
		expectFinal(r, "Succeeded", "GuestShutdown", 0)
		sched, _ := r.Find(launcherapi.EventScheduled)
		Expect(scheduled(sched).Faults).To(ContainElement(HaveField("Fault", "launcher-socket-unresponsive")), "the decision is reported")
		// guest-poweroff reports its own firing; none may be this fault's.
		e, firedHere := firedEvent(r, "launcher-socket-unresponsive")
		Expect(firedHere).To(BeFalse(), "only the KubeVirt-mode monitor acts on it: %+v", e)
		Expect(r.Log()).To(ContainSubstring("which virt-launcher-monitor serves; this launcher has none"))
	})

	It("disk-io-error: the guest sees EIO on its disk", func() {
		r := Start(VMISpec{}, "--fault", "disk-io-error=disk="+testguest.Disk, "--fault", "guest-poweroff=after=1s")
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		expectFinal(r, "Succeeded", "GuestShutdown", 0)
		r.ConsoleShows("HARNESS-DISK-READ-ERROR", time.Second)
		r.ConsoleShows("I/O error", time.Second)
		Expect(fired(r, "disk-io-error").Fired.Device).To(Equal("vda"))
	})

	It("a disk without the fault reads fine (the control for disk-io-error)", func() {
		r := Start(VMISpec{KernelArgs: "harness.readdisk harness.poweroff=0"})
		expectFinal(r, "Succeeded", "GuestShutdown", 0)
		r.ConsoleShows("HARNESS-DISK-READ-OK", time.Second)
		sched, _ := r.Find(launcherapi.EventScheduled)
		Expect(scheduled(sched).Faults).To(BeEmpty(), "a VMI that asked for no fault gets none")
	})

	It("a count-limited annotation fires on the first N attempts only", func() {
		var codes []int
		for attempt := 1; attempt <= 3; attempt++ {
			r := Start(VMISpec{Annotations: map[string]string{"faults.crashloop.dev/libvirt-error": "2*at=define"}, KernelArgs: "harness.poweroff=0"},
				"--attempt", string(rune('0'+attempt)), "--seed", "99")
			codes = append(codes, r.Exit(90*time.Second))
		}
		Expect(codes).To(Equal([]int{11, 11, 0}))
	})
})

var _ = Describe("--simulate-crash", func() {
	var dir string
	BeforeEach(func() {
		var err error
		dir, err = os.MkdirTemp("", "cl-sim-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
	})

	crash := func(args ...string) (int, string, time.Duration) {
		runtime := filepath.Join(dir, "run")
		cmd := exec.Command(built.Launcher(), launcherapi.Args{RuntimeDir: runtime, ImageDir: built.ImageDir(), Extra: args}.Build()...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		_, statErr := os.Stat(runtime)
		Expect(os.IsNotExist(statErr)).To(BeTrue(), "a simulated crash creates no libvirt state")
		return code, stderr.String(), took
	}

	It("panics with exit code 2 before libvirt, from the flag and from KubeVirt's annotation, fast", func() {
		plain := writeVMI(dir, VMISpec{Name: "plain"})
		annotated := writeVMI(dir, VMISpec{Name: "annotated", Annotations: map[string]string{faults.FailFastAnnotation: ""}})
		var times []time.Duration
		for i := 0; i < 10; i++ {
			for _, args := range [][]string{{"--simulate-crash", plain}, {annotated}} {
				code, stderr, took := crash(args...)
				Expect(code).To(Equal(2))
				Expect(stderr).To(ContainSubstring("panic: Simulated virt-launcher crash"))
				times = append(times, took)
			}
		}
		slices.Sort(times)
		median := times[len(times)/2]
		AddReportEntry("simulate-crash exec-to-exit median", median.String())
		GinkgoWriter.Printf("--simulate-crash exec-to-exit: median %v, min %v, max %v over %d runs\n", median, times[0], times[len(times)-1], len(times))
		Expect(median).To(BeNumerically("<", 500*time.Millisecond))
	})
})
