package image_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// inContainer checks from /proc that pid runs in a PID namespace other
// than ours: the VM is the container's, not the host's.
func inContainer(pid int) {
	ours, err := os.Readlink("/proc/self/ns/pid")
	Expect(err).NotTo(HaveOccurred())
	theirs, err := os.Readlink("/proc/" + itoa(pid) + "/ns/pid")
	Expect(err).NotTo(HaveOccurred())
	Expect(theirs).NotTo(Equal(ours), "QEMU %d runs in the host's PID namespace", pid)
}

var _ = Describe("the launcher image", func() {
	It("runs as KubeVirt's non-root launcher user, qemu (107:107), by default, its monitor with CAP_NET_BIND_SERVICE as a file capability", func() {
		user, err := podman("image", "inspect", "--format", "{{.Config.User}}", Image)
		Expect(err).NotTo(HaveOccurred(), user)
		Expect(user).To(Equal("107:107"), "the image's configured user")
		out, err := podman("run", "--rm", "--runtime", "runc", "--network", "none",
			"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768", "--entrypoint", "id", Image)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(HavePrefix("uid=107(qemu) gid=107(qemu)"), "id in a container of the image")
		// As 107, the monitor's DHCP server (KubeVirt's phase 2) binds port
		// 67 with the file capability KubeVirt's image gives it.
		out, err = podman("run", "--rm", "--runtime", "runc", "--network", "none",
			"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768", "--entrypoint", "getcap", Image, "/usr/bin/virt-launcher-monitor")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("cap_net_bind_service=ep"), "the monitor's file capability")
	})

	It("boots the test guest to Running and GuestReady, unprivileged, and stops gracefully on SIGTERM", func() {
		c := Run("")
		sched := c.WaitFor(launcherapi.EventScheduled, 60*time.Second)
		Expect(c.Events()[0].Event).To(Equal(launcherapi.EventScheduled), "the first line")
		Expect(sched.VMI).To(Equal(c.Name))
		if !nodeKVM() {
			Expect(sched.Scheduled.Accel).To(Equal("tcg"))
		}
		Expect(c.Inspect("{{.HostConfig.Privileged}}")).To(Equal("false"))

		// The first launch of a suite probes QEMU's capabilities, which
		// takes far longer than a warm start.
		running := c.WaitFor(launcherapi.EventRunning, 180*time.Second)
		Expect(running.Phase).To(Equal(launcherapi.PhaseRunning))
		ready := c.WaitFor(launcherapi.EventGuestReady, 120*time.Second)
		Expect(ready.Message).To(ContainSubstring("HARNESS-GUEST-READY"))
		pids := qemu.FindQEMU(c.Domain, "")
		Expect(pids).To(HaveLen(1), "one QEMU of %s", c.Domain)
		inContainer(pids[0])
		// Every process of the container, QEMU among them, runs as
		// KubeVirt's non-root launcher user: no root left in the launch.
		procs := c.nsProcs()
		Expect(procs).To(HaveKey(pids[0]), "QEMU is the container's")
		seen := []string{}
		for pid, comm := range procs {
			uids, gids := procIDs(pid)
			Expect(uids).To(Equal([]string{"107", "107", "107", "107"}), "Uid of %s (%d)", comm, pid)
			Expect(gids).To(Equal([]string{"107", "107", "107", "107"}), "Gid of %s (%d)", comm, pid)
			seen = append(seen, fmt.Sprintf("%s(%d) Uid %s", comm, pid, strings.Join(uids, " ")))
		}
		sort.Strings(seen)
		AddReportEntry("image-uids", strings.Join(seen, "; "))

		stop := time.Now()
		c.Kill("TERM")
		end := c.WaitFor(launcherapi.EventSucceeded, 60*time.Second)
		phase, reason, code := final(end)
		Expect([]any{phase, reason, code}).To(Equal([]any{"Succeeded", "Stopped", 0}))
		Expect(c.Exit(60*time.Second)).To(Equal(0), "the container's exit code is the launcher's")
		AddReportEntry("image-boot", fmt.Sprintf("Scheduled->Running %.2fs, Running->GuestReady %.2fs, SIGTERM->exit %.2fs",
			running.Time.Sub(sched.Time).Seconds(), ready.Time.Sub(running.Time).Seconds(), time.Since(stop).Seconds()))
		_, err := podman("container", "exists", c.ID)
		Expect(err).To(HaveOccurred(), "--rm must remove container %s", c.ID)
	})

	It("runs a vTPM's swtpm beside QEMU, both as 107", func() {
		c := RunVMI("", func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Devices.TPM = &v1.TPMDevice{} })
		c.WaitFor(launcherapi.EventGuestReady, 180*time.Second)
		pids := qemu.FindQEMU(c.Domain, "")
		Expect(pids).To(HaveLen(1), "one QEMU of %s", c.Domain)
		seen := map[string]bool{}
		for pid, comm := range c.nsProcs() {
			uids, _ := procIDs(pid)
			Expect(uids).To(Equal([]string{"107", "107", "107", "107"}), "Uid of %s (%d)", comm, pid)
			seen[comm] = true
		}
		Expect(seen).To(HaveKey("swtpm"), "libvirt's swtpm for the vTPM, in the container")
		c.Kill("TERM")
		end := c.WaitFor(launcherapi.EventSucceeded, 60*time.Second)
		phase, reason, code := final(end)
		Expect([]any{phase, reason, code}).To(Equal([]any{"Succeeded", "Stopped", 0}))
		Expect(c.Exit(60 * time.Second)).To(Equal(0))
	})

	It("leaves no QEMU, no container and no folder when the container is killed with SIGKILL", func() {
		c := Run("")
		c.WaitFor(launcherapi.EventRunning, 180*time.Second)
		pids := qemu.FindQEMU(c.Domain, "")
		Expect(pids).To(HaveLen(1), "one QEMU of %s", c.Domain)
		inContainer(pids[0])
		upper := c.Inspect("{{.GraphDriver.Data.UpperDir}}")
		Expect(upper).To(BeADirectory(), "the container's writable layer (its /run/crashloop among others)")

		kill := time.Now()
		c.Kill("KILL")
		Expect(c.Exit(60*time.Second)).To(Equal(137), "SIGKILL: 128+9")
		AddReportEntry("image-kill", fmt.Sprintf("SIGKILL->podman run returned %.2fs", time.Since(kill).Seconds()))
		for _, ev := range c.Events() {
			Expect(ev.Final()).To(BeFalse(), "a killed launcher writes no final event, got %s", ev.Event)
		}
		Eventually(func() []int { return qemu.FindQEMU(c.Domain, "") }).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).
			Should(BeEmpty(), "QEMU %v outlived its container", pids)
		_, err := os.Stat("/proc/" + itoa(pids[0]))
		Expect(os.IsNotExist(err)).To(BeTrue(), "QEMU %d is gone from /proc", pids[0])
		_, err = podman("container", "exists", c.ID)
		Expect(err).To(HaveOccurred(), "container %s is left", c.ID)
		Eventually(func() bool { _, err := os.Stat(upper); return os.IsNotExist(err) }).WithTimeout(10*time.Second).
			Should(BeTrue(), "the container's folder %s is left", upper)
	})

	It("is OOM-killed by the kernel when its memory limit is below what QEMU needs", Label("oom"), func() {
		// 64 MiB for the launcher and a QEMU with a 256 MiB guest; no swap.
		c := Run("", "--memory", "64m", "--memory-swap", "64m")
		Expect(c.Inspect("{{.HostConfig.Memory}}")).To(Equal("67108864"))
		kills := c.OOMKills()
		end := c.WaitFor(launcherapi.EventFailed, 180*time.Second)
		phase, reason, code := final(end)
		Expect(phase).To(Equal(launcherapi.PhaseFailed))
		// Killed after Running is a crash, before it a QEMU failure.
		_, ran := c.Find(launcherapi.EventRunning)
		if ran {
			Expect([]any{reason, code}).To(Equal([]any{launcherapi.ReasonVMCrashed, 13}))
		} else {
			Expect([]any{reason, code}).To(Equal([]any{launcherapi.ReasonQemuFailed, 12}))
		}
		Expect(end.Message).To(ContainSubstring("SIGKILL"), "the kernel's OOM killer sends SIGKILL")
		Expect(c.Exit(60*time.Second)).To(Equal(code), "the container's exit code is the launcher's")
		Expect(kills()).To(BeNumerically(">=", 1), "the container's memory cgroup counts the OOM kill")
		_, err := os.Stat(filepath.Join(c.Dir, "oom"))
		AddReportEntry("image-oom", fmt.Sprintf("Running reached: %v; final %s/%s exit %d; cgroup oom_kill %d; conmon's oom file: %v",
			ran, phase, reason, code, kills(), err == nil))
	})
})
