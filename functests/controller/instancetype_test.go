package controller_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

var _ = Describe("virt-controller run with a VM naming an instancetype and a preference", Label("controller", "instancetype"), func() {
	It("expands them from the same file and runs the VMI with the instancetype's CPUs, the VM keeping spec.instancetype", func() {
		requireImages()
		expander := filepath.Join(filepath.Dir(suite.controller), "virt-launcher-expand")
		_, err := os.Stat(expander)
		Expect(err).NotTo(HaveOccurred(), "the controller finds virt-launcher-expand next to itself: build it with `make kubevirtmode` (or set CRASHLOOP_BIN_DIR)")
		w := newWorkspace()
		example := filepath.Join(suite.repo, testguest.InstancetypeExample)
		p := w.startController([]string{"--time-scale", scale, "--qemu-timeout", bootTimeout}, example)
		const name = "testvm-instancetype"
		Eventually(func() v1.VirtualMachinePrintableStatus { return w.status(name).Status.PrintableStatus },
			120*time.Second, 200*time.Millisecond).Should(Equal(v1.VirtualMachineStatusRunning), func() string { return p.Stderr() })

		pids := watchdog.FindQEMU("default_"+name, "")
		Expect(pids).To(HaveLen(1), "one QEMU of the VM's VMI")
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/cmdline")
		Expect(err).NotTo(HaveOccurred())
		qemu := strings.ReplaceAll(string(cmdline), "\x00", " ")
		for _, want := range testguest.InstancetypeQEMU() {
			Expect(qemu).To(MatchRegexp(want.String()), "QEMU's command line")
		}

		rec := w.record(name)
		Expect(rec.VM.Spec.Instancetype).NotTo(BeNil(), "the VM is shown as written, as KubeVirt's VM object")
		Expect(rec.VM.Spec.Instancetype.Name).To(Equal("testguest-small"))
		Expect(rec.VM.Spec.Template.Spec.Domain.CPU).To(BeNil())
		Expect(rec.VMI.Spec.Domain.CPU).NotTo(BeNil(), "the VMI carries the expansion")
		Expect(rec.VMI.Spec.Domain.CPU.Cores).To(BeEquivalentTo(2))
	})
})
