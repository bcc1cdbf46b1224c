// Package converter turns a KubeVirt VirtualMachineInstance into a libvirt
// domain (through libvirtxml, never string templates): devices, disks and
// the files behind them (claims, containerDisks, cloud-init), networks,
// firmware and features, and the accelerator choice (KVM only with
// hardware virtualization and a hardware KVM module, else TCG). It is
// pure Go: the launcher's converter process links it, the libvirt runner
// does not, so the process that holds libvirt while the guest runs carries
// none of the Kubernetes and KubeVirt types.
package converter
