package launcher_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/launchharness"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	kvmanifest "github.com/crashloop-harness/crashloop/pkg/manifest"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// The hook sidecars of KubeVirt's examples (examples/vmi-with-sidecar-hook.yaml):
// KubeVirt's own example-hook-sidecar image, which sets the SMBIOS base
// board manufacturer from an annotation.
const (
	exampleSidecar   = `[{"args": ["--version", "v1alpha2"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel"}]`
	manufacturerNote = "smbios.vm.kubevirt.io/baseBoardManufacturer"
)

// hookConfigMap is a ConfigMap beside the VMI whose script KubeVirt's
// sidecar-shim runs as onDefineDomain: it names the base board product.
const hookConfigMap = `---
apiVersion: v1
kind: ConfigMap
metadata:
  name: board
  namespace: functest
data:
  hook.sh: |
    #!/bin/sh
    while [ $# -gt 0 ]; do
      case $1 in --domain) domain=$2; shift ;; esac
      shift
    done
    printf '%s\n' "$domain" | sed 's|<baseBoard></baseBoard>|<baseBoard><entry name="product">functest board</entry></baseBoard>|'
`

// sidecarGate switches on KubeVirt's Sidecar feature gate, without which
// the launcher refuses the annotation (as virt-api does).
var sidecarGate = []string{"--feature-gates", launcherapi.GateSidecar}

var _ = Describe("hook sidecars (hooks.kubevirt.io/hookSidecars)", func() {
	It("runs KubeVirt's example hook sidecar: QEMU gets the base board it sets, and the sidecar is gone once the domain is defined", func() {
		r := Start(VMISpec{Grace: 10, Annotations: map[string]string{
			kvmanifest.HookSidecarsAnnotation: exampleSidecar, manufacturerNote: "Radical Edward"}}, sidecarGate...)
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		Expect(qemuArgs(r)).To(ContainElement(And(HavePrefix("type=2,"), ContainSubstring("manufacturer=Radical Edward"))), "QEMU's -smbios for the base board")
		Expect(liveDomain(r)).To(ContainSubstring(`<entry name='manufacturer'>Radical Edward</entry>`), "libvirt's live domain XML")
		Expect(sidecarShims()).To(BeEmpty(), "a sidecar outlived the hooks")
		Expect(r.LogLines("hook sidecars rewrote the domain")).NotTo(BeEmpty(), "the launcher log names the hooks")
	})

	It("runs a ConfigMap's script beside the VMI through KubeVirt's sidecar-shim", func() {
		text, spec := manifest(VMISpec{Grace: 10, Annotations: map[string]string{
			kvmanifest.HookSidecarsAnnotation: `[{"args": ["--version", "v1alpha3"], "configMap": {"name": "board", "key": "hook.sh", "hookPath": "/usr/bin/onDefineDomain"}}]`}})
		r := launchharness.Start(launchharness.Spec{Namespace: namespace, Name: spec.Name, Manifest: text + hookConfigMap,
			Args: launcherapi.Args{FeatureGates: []string{launcherapi.GateSidecar}}})
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		Expect(qemuArgs(r)).To(ContainElement(And(HavePrefix("type=2,"), ContainSubstring("product=functest board"))))
		Expect(sidecarShims()).To(BeEmpty(), "a sidecar outlived the hooks")
	})

	It("without the sidecar, the same VMI's QEMU has no base board (the negative control)", func() {
		r := Start(VMISpec{Grace: 10, Annotations: map[string]string{manufacturerNote: "Radical Edward"}})
		r.WaitFor(launcherapi.EventGuestReady, 90*time.Second)
		Expect(qemuArgs(r)).NotTo(ContainElement(HavePrefix("type=2,")))
	})

	DescribeTable("refuses what it cannot run with one line naming the annotation, before any QEMU",
		func(sidecars, want string) {
			r := Start(VMISpec{Annotations: map[string]string{kvmanifest.HookSidecarsAnnotation: sidecars}}, sidecarGate...)
			Expect(r.Exit(30 * time.Second)).To(Equal(int(launcherapi.ExitInvalidManifest)))
			lines := r.LogLines(kvmanifest.HookSidecarsAnnotation)
			Expect(lines).To(HaveLen(1))
			Expect(lines[0]).To(ContainSubstring(want))
			Expect(sidecarShims()).To(BeEmpty())
		},
		Entry("an image it does not know", `[{"image": "quay.io/someone/my-hook:1"}]`, `field image: "quay.io/someone/my-hook:1" is not an image this launcher runs`),
		Entry("a ConfigMap not beside the VMI", `[{"configMap": {"name": "nowhere", "key": "k", "hookPath": "/usr/bin/onDefineDomain"}}]`, `ConfigMap "nowhere" not found`),
		Entry("a sidecar that dies first", `[{"image": "kubevirt/example-hook-sidecar", "args": ["--version", "v9"]}]`, "sidecar 0 (hook-sidecar-0, image \"kubevirt/example-hook-sidecar\") exited before the domain was rewritten: exit status 1: "),
	)
})

// qemuArgs is the command line of the launch's QEMU.
func qemuArgs(r *Run) []string {
	pids := qemu.FindQEMU(r.Domain, "")
	Expect(pids).To(HaveLen(1))
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/cmdline")
	Expect(err).NotTo(HaveOccurred())
	return strings.Split(string(cmdline), "\x00")
}

// liveDomain is the domain's live XML, as libvirt keeps it in the embedded
// root's run folder (its status file).
func liveDomain(r *Run) string {
	var files []string
	Expect(filepath.WalkDir(r.Runtime, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == r.Domain+".xml" && strings.Contains(p, "/run/") {
			files = append(files, p)
		}
		return nil
	})).To(Succeed())
	Expect(files).To(HaveLen(1), "libvirt's status file of %s under %s", r.Domain, r.Runtime)
	b, err := os.ReadFile(files[0])
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// sidecarShims lists the running processes of the built sidecar-shim.
func sidecarShims() []string {
	shim := filepath.Join(built.BinDir(), "sidecar-shim")
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == shim {
			out = append(out, fmt.Sprintf("pid %s", e.Name()))
		}
	}
	return out
}
