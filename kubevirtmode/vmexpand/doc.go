// Package vmexpand is what KubeVirt v1.6.0 does to a VirtualMachine before
// its VMI exists, linked from kubevirt.io/kubevirt and called in
// KubeVirt's order: virt-api's VM mutator (defaults.SetVirtualMachineDefaults
// with the preference it finds), virt-api's VM admitter (the instancetype
// and preference applied to a copy: a conflict or an unmet preference
// requirement refuses the VM), and virt-controller's start of the VM
// (setupVMIFromVM's template, the device preferences, a disk per volume,
// the default network interface, the instancetype and preference
// annotations and the instancetype and preference applied,
// pkg/virt-controller/watch/vm and pkg/instancetype/controller/vm).
//
// It is the one copy of that code: virt-launcher-expand (the launcher's
// expansion of instancetypes and preferences) and tools/kvrender (the
// reference side of the differential) both call VM.
package vmexpand
