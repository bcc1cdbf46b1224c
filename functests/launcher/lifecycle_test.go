package launcher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

var _ = Describe("a VM's lifecycle", func() {
	It("boots to Running, reports the guest ready, and succeeds when the guest powers off", func() {
		r := Start(VMISpec{KernelArgs: "harness.poweroff=1"})
		sched := r.Next(10 * time.Second)
		Expect(sched.Event).To(Equal(launcherapi.EventScheduled))
		Expect(sched.Phase).To(Equal(launcherapi.PhaseScheduled))
		Expect(sched.VMI).To(Equal(r.Name))
		Expect(sched.Time.IsZero()).To(BeFalse())
		drawn := scheduled(sched).QemuTimeoutSeconds
		Expect(drawn).To(BeNumerically(">=", 240))
		Expect(drawn).To(BeNumerically("<", 360))

		running := r.WaitFor(launcherapi.EventRunning, 60*time.Second)
		Expect(running.Phase).To(Equal(launcherapi.PhaseRunning))
		ready := r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		Expect(ready.Time.After(running.Time)).To(BeTrue(), "GuestReady must follow Running")
		Expect(ready.Message).To(ContainSubstring("HARNESS-GUEST-READY"))

		end := r.WaitFor(launcherapi.EventSucceeded, 60*time.Second)
		phase, reason, code := final(end)
		Expect([]any{phase, reason, code}).To(Equal([]any{"Succeeded", "GuestShutdown", 0}))
		Expect(r.Exit(20 * time.Second)).To(Equal(0))
		r.ConsoleShows("HARNESS-POWEROFF-NOW", time.Second)
		Expect(r.RuntimeEntries()).To(BeEmpty(), "per-VMI libvirt state must be removed")
	})

	It("fails with QemuStartTimeout inside [base, base+jitter) when QEMU never runs", func() {
		const base, jitter = 3 * time.Second, 2 * time.Second
		r := Start(VMISpec{}, "--qemu-timeout", base.String(), "--qemu-timeout-jitter", jitter.String(), "--fault", "qemu-hang")
		sched := r.Next(10 * time.Second)
		drawn := time.Duration(scheduled(sched).QemuTimeoutSeconds * float64(time.Second))
		Expect(drawn).To(BeNumerically(">=", base))
		Expect(drawn).To(BeNumerically("<", base+jitter))
		end := r.WaitFor(launcherapi.EventFailed, 30*time.Second)
		phase, reason, code := final(end)
		Expect([]any{phase, reason, code}).To(Equal([]any{"Failed", "QemuStartTimeout", 10}))
		_, ran := r.Find(launcherapi.EventRunning)
		Expect(ran).To(BeFalse(), "a paused QEMU is not Running")
		elapsed := end.Time.Sub(sched.Time)
		Expect(elapsed).To(BeNumerically(">=", drawn), "failed before its drawn timeout")
		Expect(elapsed).To(BeNumerically("<", drawn+time.Second), "failed long after its drawn timeout")
		Expect(elapsed).To(BeNumerically("<", base+jitter+time.Second))
		Expect(r.Exit(20 * time.Second)).To(Equal(10))
	})

	It("draws the same timeout for the same seed", func() {
		var drawn []string
		for i := 0; i < 2; i++ {
			r := Start(VMISpec{}, "--seed", "1234", "--simulate-crash=false", "--fault", "libvirt-error=at=define")
			drawn = append(drawn, scheduled(r.Next(10*time.Second)).QemuTimeout)
			Expect(r.Exit(20 * time.Second)).To(Equal(11))
		}
		Expect(drawn[0]).To(Equal(drawn[1]))
	})

	It("stops gracefully on SIGTERM: ACPI power button, Succeeded/Stopped, exit 0", func() {
		r := Start(VMISpec{Grace: 20})
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		r.Signal(syscall.SIGTERM)
		end := r.WaitFor(launcherapi.EventSucceeded, 30*time.Second)
		phase, reason, code := final(end)
		Expect([]any{phase, reason, code}).To(Equal([]any{"Succeeded", "Stopped", 0}))
		Expect(end.Message).To(ContainSubstring("within the grace period"))
		Expect(r.Exit(20 * time.Second)).To(Equal(0))
		r.ConsoleShows("HARNESS-POWER-BUTTON", time.Second)
		Expect(r.RuntimeEntries()).To(BeEmpty())
	})

	It("destroys the domain when the guest ignores the power button past the grace period", func() {
		r := Start(VMISpec{KernelArgs: "harness.nopowerbutton"}, "--grace-period", "2s")
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		r.Signal(syscall.SIGTERM)
		end := r.WaitFor(launcherapi.EventSucceeded, 30*time.Second)
		Expect(end.Message).To(ContainSubstring("did not shut down within the 2s grace period"))
		Expect(r.Exit(20 * time.Second)).To(Equal(0))
	})

	It("leaves no QEMU behind when the launcher is killed with SIGKILL", func() {
		r := Start(VMISpec{})
		r.WaitFor(launcherapi.EventRunning, 60*time.Second)
		Expect(qemu.FindQEMU(r.Domain, "")).To(HaveLen(1))
		r.Signal(syscall.SIGKILL)
		Expect(r.Exit(10 * time.Second)).To(Equal(-1))
		killedAt := time.Now()
		Eventually(func() []int { return qemu.FindQEMU(r.Domain, "") }).WithTimeout(3 * time.Second).WithPolling(20 * time.Millisecond).Should(BeEmpty())
		GinkgoWriter.Printf("QEMU gone %v after the launcher's SIGKILL\n", time.Since(killedAt))
		Eventually(r.RuntimeEntries).WithTimeout(3 * time.Second).Should(BeEmpty())
	})
})

var _ = Describe("bad input", func() {
	var dir string
	BeforeEach(func() {
		var err error
		dir, err = os.MkdirTemp("", "cl-bad-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
	})
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		Expect(os.WriteFile(p, []byte(content), 0o644)).To(Succeed())
		return p
	}
	good := func() string { return writeVMI(dir, VMISpec{Name: "good"}) }
	edit := func(old, new string) string {
		b, _ := os.ReadFile(good())
		Expect(string(b)).To(ContainSubstring(old))
		return write("edited.yaml", strings.Replace(string(b), old, new, 1))
	}

	DescribeTable("gives one clear message, a distinct exit code, and starts nothing",
		func(args func() []string, wantCode int, wantMsg ...string) {
			runtime := filepath.Join(dir, "run")
			full := launcherapi.Args{ImageDir: built.ImageDir(), RuntimeDir: runtime, ConsoleLog: filepath.Join(dir, "console.log"), Extra: args()}
			cmd := exec.Command(built.Launcher(), full.Build()...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			Expect(code).To(Equal(wantCode), "stderr: %s", stderr.String())
			for _, m := range wantMsg {
				Expect(stderr.String()).To(ContainSubstring(m))
			}
			Expect(stderr.String()).NotTo(ContainSubstring("goroutine "), "no panic trace for bad input")
			Expect(stdout.String()).To(BeEmpty(), "no events for input that starts nothing")
			entries, _ := os.ReadDir(runtime)
			Expect(entries).To(BeEmpty(), "no libvirt state for input that starts nothing")
		},
		Entry("missing file", func() []string { return []string{filepath.Join(dir, "nope.yaml")} }, 4, "nope.yaml", "no such file"),
		Entry("a folder instead of a file", func() []string { return []string{dir} }, 4, dir),
		Entry("invalid YAML", func() []string { return []string{write("bad.yaml", "kind: [VirtualMachineInstance\n")} }, 5, "bad.yaml", "not valid YAML"),
		Entry("wrong kind", func() []string { return []string{edit("kind: VirtualMachineInstance", "kind: VirtualMachinePreset")} }, 5,
			"edited.yaml", "field kind", `want "VirtualMachineInstance" or "VirtualMachine"`),
		Entry("a misspelled field", func() []string { return []string{edit("guest: 256Mi", "gest: 256Mi")} }, 5, "spec.domain.memory.gest", "unknown field"),
		Entry("nothing to boot", func() []string {
			vmi := testguest.VMI(testguest.Spec{Name: "noboot", Namespace: namespace})
			vmi.Spec.Domain.Firmware, vmi.Spec.Domain.Devices, vmi.Spec.Volumes = nil, v1.Devices{}, nil
			s, err := testguest.Manifest(vmi)
			Expect(err).NotTo(HaveOccurred())
			return []string{write("noboot.yaml", s)}
		}, 5, "noboot.yaml", "spec.domain.firmware.kernelBoot", "nothing to boot"),
		Entry("an unknown image", func() []string {
			return []string{edit("image: "+testguest.Image, "image: quay.io/nope:1")}
		}, 5,
			`unknown image "quay.io/nope:1"`, testguest.Image),
		Entry("an unsupported field", func() []string {
			return []string{edit("  volumes:", "  networks:\n    - name: default\n      multus: {networkName: x}\n  volumes:")}
		}, 5, "spec.networks[0].multus.networkName", "not supported"),
		Entry("a pod network no interface uses", func() []string {
			return []string{edit("  volumes:", "  networks:\n    - name: default\n      pod: {}\n  volumes:")}
		}, 5, "spec.networks[name=default]", "no interface"),
		Entry("an invalid duration", func() []string { return []string{"--qemu-timeout", "soon", good()} }, 3, "--qemu-timeout", "soon"),
		Entry("a negative jitter", func() []string { return []string{"--qemu-timeout-jitter", "-1s", good()} }, 3, "--qemu-timeout-jitter"),
		Entry("an unknown --accel", func() []string { return []string{"--accel", "hvf", good()} }, 3, "--accel", `"hvf"`, "auto, kvm, tcg"),
		Entry("no manifest", func() []string { return []string{} }, 3, "missing the VMI manifest"),
		Entry("an unknown fault flag", func() []string { return []string{"--fault", "qemu-hung", good()} }, 3, `--fault "qemu-hung"`, "qemu-hang"),
		Entry("a bad fault annotation", func() []string {
			return []string{edit("  uid:", "  annotations:\n    faults.crashloop.dev/qemu-kill: \"signal=SIGFOO\"\n  uid:")}
		}, 5, `annotation "faults.crashloop.dev/qemu-kill"`, "SIGFOO", "SIGKILL"),
	)
})

var _ = Describe("the manifest on stdin", func() {
	It("is read once by the front and handed on: a dry run of - prints what a dry run of the file prints", func() {
		dir, err := os.MkdirTemp("", "cl-stdin-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		path := writeVMI(dir, VMISpec{Name: "stdin", UID: "6d3c0000-0000-4000-8000-000000000001"})
		dryRun := func(manifest string) string {
			a := launcherapi.Args{ImageDir: built.ImageDir(), RuntimeDir: filepath.Join(dir, "run"), ConsoleLog: filepath.Join(dir, "console.log"),
				DryRun: true, Accel: launcherapi.AccelTCG, LogLevel: "error", Manifest: manifest}
			cmd := exec.Command(built.Launcher(), a.Build()...)
			f, err := os.Open(path)
			Expect(err).NotTo(HaveOccurred())
			defer f.Close()
			cmd.Stdin = f
			out, err := cmd.Output()
			Expect(err).NotTo(HaveOccurred())
			// Each launch has a per-VMI folder of its own.
			return regexp.MustCompile(`/vmi-[0-9]+`).ReplaceAllString(string(out), "/vmi-N")
		}
		fromFile := dryRun(path)
		Expect(fromFile).To(ContainSubstring("<domain"))
		Expect(dryRun("-")).To(Equal(fromFile))
	})
})
