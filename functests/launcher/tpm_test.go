package launcher_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

var _ = Describe("a vTPM (devices.tpm: {})", func() {
	DescribeTable("reaches QEMU as a tpm-tis device on libvirt's swtpm, and no swtpm outlives the launcher",
		func(sig syscall.Signal, exit int) {
			r := Start(VMISpec{TPM: true, Grace: 20})
			r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
			pids := qemu.FindQEMU(r.Domain, "")
			Expect(pids).To(HaveLen(1))
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/cmdline")
			Expect(err).NotTo(HaveOccurred())
			args := strings.Split(string(cmdline), "\x00")
			Expect(args).To(ContainElement(MatchRegexp(`^emulator,id=tpm-tpm0,chardev=chrtpm$`)), "QEMU has no -tpmdev emulator: %q", args)
			Expect(args).To(ContainElement(ContainSubstring(`"driver":"tpm-tis","tpmdev":"tpm-tpm0"`)), "QEMU has no tpm-tis device: %q", args)
			Expect(watchdog.FindSwtpmUnder(r.Runtime)).To(HaveLen(1), "one swtpm beside QEMU")

			r.Signal(sig)
			Expect(r.Exit(40 * time.Second)).To(Equal(exit))
			stopped := time.Now()
			Eventually(func() []int { return watchdog.FindSwtpmUnder(r.Runtime) }).WithTimeout(3*time.Second).WithPolling(20*time.Millisecond).
				Should(BeEmpty(), "a swtpm outlived the launcher")
			GinkgoWriter.Printf("swtpm gone %v after the launcher's exit (%v)\n", time.Since(stopped), sig)
			// Its socket, pid file and state were under the per-VMI root.
			Eventually(r.RuntimeEntries).WithTimeout(3 * time.Second).Should(BeEmpty())
		},
		Entry("stopped with SIGTERM", syscall.SIGTERM, 0),
		Entry("killed with SIGKILL (the reaper)", syscall.SIGKILL, -1),
	)
})
