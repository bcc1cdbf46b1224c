package controller_test

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("virt-controller bad input", Label("controller"), func() {
	var w *workspace
	BeforeEach(func() { w = newWorkspace() })

	// run starts "virt-controller run" expecting it to refuse at once.
	refuse := func(want []string, args ...string) {
		base := []string{"run", "-o", "json", "--state-dir", w.state, "--launcher", suite.launcher}
		out, errs, code := cli(append(base, args...)...)
		Expect(code).To(Equal(2), "stdout %s stderr %s", out, errs)
		for _, s := range want {
			Expect(errs).To(ContainSubstring(s))
		}
		Expect(errs).NotTo(ContainSubstring("panic"))
	}

	It("names the field and the allowed values for an unknown runStrategy", func() {
		m := w.write("vm.yaml", strings.Replace(vmSpec{name: "a", strategy: "Always"}.manifest(), "runStrategy: Always", "runStrategy: Sometimes", 1))
		refuse([]string{m, "spec.runStrategy", `"Sometimes"`, "Always, RerunOnFailure, Manual, Halted, Once"}, m)
	})

	It("explains that a VMI is not a VM", func() {
		data, err := os.ReadFile(filepath.Join(suite.repo, "examples", "vmi-testguest.yaml"))
		Expect(err).NotTo(HaveOccurred())
		m := w.write("vmi.yaml", string(data))
		refuse([]string{m, "kind", "VirtualMachineInstance", "spec.template"}, m)
	})

	It("refuses duplicate names, naming both manifests", func() {
		a := w.write("a.yaml", vmSpec{name: "same", strategy: "Always"}.manifest())
		b := w.write("b.yaml", vmSpec{name: "same", strategy: "Halted"}.manifest())
		refuse([]string{"duplicate", "default/same", a, b}, a, b)
	})

	It("refuses a state folder it cannot use, and a corrupt record, losing nothing", func() {
		m := w.write("vm.yaml", vmSpec{name: "a", strategy: "Halted"}.manifest())
		notDir := w.write("not-a-folder", "x")
		out, errs, code := cli("run", "-o", "json", "--state-dir", notDir, "--launcher", suite.launcher, m)
		Expect(code).To(Equal(2), out+errs)
		Expect(errs).To(ContainSubstring(notDir))

		Expect(os.MkdirAll(filepath.Join(w.state, "vms"), 0o755)).To(Succeed())
		corrupt := filepath.Join(w.state, "vms", "default_a.json")
		Expect(os.WriteFile(corrupt, []byte(`{"version":1,"vm":`), 0o644)).To(Succeed())
		refuse([]string{corrupt}, m)
		data, _ := os.ReadFile(corrupt)
		Expect(string(data)).To(Equal(`{"version":1,"vm":`), "the record is left as it was")
	})

	It("answers stop of an unknown VM with its name and the known ones, changing nothing", func() {
		m := w.write("vm.yaml", vmSpec{name: "known", strategy: "Halted"}.manifest())
		w.startController(nil, m)
		Eventually(func() error { _, err := os.Stat(filepath.Join(w.state, "vms", "default_known.json")); return err }, 10*time.Second).Should(Succeed())
		before, _ := os.ReadFile(filepath.Join(w.state, "vms", "default_known.json"))
		_, errs, code := cli("stop", "ghost", "--state-dir", w.state)
		Expect(code).To(Equal(3), errs)
		Expect(errs).To(ContainSubstring("default/ghost"))
		Expect(errs).To(ContainSubstring("default/known"))
		after, _ := os.ReadFile(filepath.Join(w.state, "vms", "default_known.json"))
		Expect(after).To(Equal(before))
		_, errs, code = cli("stop", "known", "--state-dir", w.state)
		Expect(code).To(Equal(1), "a Halted VM is not running: %s", errs)
		Expect(errs).To(ContainSubstring("not running"))
	})

	It("says when no controller runs on the state folder", func() {
		_, errs, code := cli("stop", "a", "--state-dir", w.state)
		Expect(code).To(Equal(4), errs)
		Expect(errs).To(ContainSubstring("no virt-controller is running"))
		_, errs, code = cli("status", "a", "--state-dir", w.state)
		Expect(code).NotTo(Equal(0), errs)
	})
})
