package realvms_test

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

var _ = Describe("a VirtualMachine naming an instancetype and a preference", func() {
	It("boots the test guest with the instancetype's CPUs and memory, from one file and from a VM file with --instancetypes", func() {
		data, err := os.ReadFile(filepath.Join(built.Root(), testguest.InstancetypeExample))
		Expect(err).NotTo(HaveOccurred())
		docs := strings.Split(string(data), "\n---\n")
		Expect(docs).To(HaveLen(3), "the example holds the VM, its instancetype and its preference")
		objects := filepath.Join(suiteDir, "instancetypes")
		Expect(os.MkdirAll(objects, 0o755)).To(Succeed())
		DeferCleanup(os.RemoveAll, objects)
		for i, name := range []string{"instancetype.yaml", "preference.yaml"} {
			Expect(os.WriteFile(filepath.Join(objects, name), []byte(docs[i+1]), 0o644)).To(Succeed())
		}
		vmOnly := strings.Replace(docs[0], "name: testvm-instancetype\n", "name: rv-instancetype-dir\n", 1)

		one := Start(string(data), "default", "testvm-instancetype")
		dir := Start(vmOnly, "default", "rv-instancetype-dir", "--instancetypes", objects)
		for _, l := range []*Launch{one, dir} {
			l.WaitFor(launcherapi.EventRunning, 2*time.Minute)
			cmdline := qemuCmdline(l.Domain)
			for _, want := range testguest.InstancetypeQEMU() {
				Expect(cmdline).To(MatchRegexp(want.String()), "QEMU of %s", l.Domain)
			}
			l.WaitFor(launcherapi.EventGuestReady, 3*time.Minute)
		}
		for _, l := range []*Launch{one, dir} {
			l.Stop()
		}
		for _, l := range []*Launch{one, dir} {
			Expect(l.Exit(time.Minute)).To(Equal(0))
			Expect(final(l)).To(Equal("Succeeded"))
		}
	})

	It("is refused with the missing object's kind and name, nothing started", func() {
		data, err := os.ReadFile(filepath.Join(built.Root(), testguest.InstancetypeExample))
		Expect(err).NotTo(HaveOccurred())
		vmOnly := strings.Split(string(data), "\n---\n")[0]
		l := Start(vmOnly, "default", "testvm-instancetype")
		Expect(l.Exit(time.Minute)).To(Equal(int(launcherapi.ExitInvalidManifest)))
		Expect(l.Log()).To(ContainSubstring(`field spec.instancetype: VirtualMachineInstancetype "testguest-small" in namespace "default" not found`))
		Expect(l.Events()).To(BeEmpty(), "no Scheduled event: nothing started")
	})
})
