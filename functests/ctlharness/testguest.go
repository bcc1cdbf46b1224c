package ctlharness

import (
	"github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/testguest"
)

// The test guest lives in functests/testguest. These three names are kept
// only for the cluster suite (functests/cluster), which calls them here;
// once it calls testguest directly they go.

// DefaultKernelArgs is testguest.KernelArgs.
const DefaultKernelArgs = testguest.KernelArgs

// TestGuestVM is testguest.VM.
func TestGuestVM(name string, strategy v1.VirtualMachineRunStrategy, annotations map[string]string, kernelArgs string) *v1.VirtualMachine {
	return testguest.VM(name, strategy, annotations, kernelArgs)
}

// Manifest is testguest.Manifest, asserting with gomega.
func Manifest(vm *v1.VirtualMachine) string {
	m, err := testguest.Manifest(vm)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return m
}
