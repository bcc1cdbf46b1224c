package testguest

import "regexp"

// InstancetypeExample is the repository's example of a VirtualMachine that
// names an instancetype and a preference, with both objects in the same
// file, relative to the repository's root.
const InstancetypeExample = "examples/vm-instancetype.yaml"

// InstancetypeQEMU is the instancetype's and preference's share of
// InstancetypeExample as QEMU's command line shows it: 2 vCPUs as 2 cores
// of one socket (the preference's preferredCPUTopology, with KubeVirt's
// hot-plug room of 4 sockets), 384Mi, and the disk on virtio (the
// preference's preferredDiskBus). libvirt 9.0 may or may not write dies=1
// and size=.
func InstancetypeQEMU() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`-smp 2,maxcpus=8,sockets=4,(dies=1,)?cores=2,threads=1 `),
		regexp.MustCompile(`-m (size=393216k|384)[, ]`),
		regexp.MustCompile(`virtio-blk-pci`),
	}
}
