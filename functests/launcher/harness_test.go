package launcher_test

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/launchharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// namespace is the suite's VMI namespace; its domains are functest_NAME.
const namespace = "functest"

// VMISpec parameterizes the test VMI.
type VMISpec struct {
	Name        string
	UID         string
	KernelArgs  string
	Annotations map[string]string
	Grace       int
	TPM         bool // devices.tpm: {}
}

// Run is one virt-launcher process under test.
type Run = launchharness.Launch

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// manifest renders the test guest's VMI for spec, with a fresh name and
// UID where spec has none; the kernel arguments are the guest's defaults
// followed by spec's.
func manifest(spec VMISpec) (string, VMISpec) {
	if spec.Name == "" {
		spec.Name = "ft-" + uuid()[:8]
	}
	if spec.UID == "" {
		spec.UID = uuid()
	}
	vmi := testguest.VMI(testguest.Spec{Name: spec.Name, Namespace: namespace, UID: types.UID(spec.UID),
		Annotations: spec.Annotations, KernelArgs: testguest.KernelArgs + " " + spec.KernelArgs, GraceSeconds: int64(spec.Grace)})
	if spec.TPM {
		vmi.Spec.Domain.Devices.TPM = &v1.TPMDevice{}
	}
	text, err := testguest.Manifest(vmi)
	Expect(err).NotTo(HaveOccurred())
	return text, spec
}

// writeVMI renders a manifest into dir.
func writeVMI(dir string, spec VMISpec) string {
	text, spec := manifest(spec)
	path := filepath.Join(dir, spec.Name+".yaml")
	Expect(os.WriteFile(path, []byte(text), 0o644)).To(Succeed())
	return path
}

// Start launches virt-launcher on a fresh VMI with extra flags.
func Start(spec VMISpec, flags ...string) *Run {
	text, spec := manifest(spec)
	return launchharness.Start(launchharness.Spec{Namespace: namespace, Name: spec.Name, Manifest: text,
		Args: launcherapi.Args{Extra: flags}})
}

func final(ev launcherapi.Event) (string, string, int) { return launchharness.Final(ev) }

// scheduled is a Scheduled event's values.
func scheduled(ev launcherapi.Event) *launcherapi.ScheduledDetails {
	Expect(ev.Scheduled).NotTo(BeNil(), "event %s carries no Scheduled values", ev.Event)
	return ev.Scheduled
}
