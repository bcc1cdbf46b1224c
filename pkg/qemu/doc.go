// Package qemu turns a KubeVirt VirtualMachineInstance into a libvirt
// domain (through libvirtxml, never string templates) and runs it: the
// accelerator choice (KVM only with hardware virtualization and a hardware
// KVM module, else TCG), the libvirt connection (the embedded QEMU driver
// under a per-VMI root by default, with a shared QEMU capability cache),
// lifecycle events, the serial console and fault plumbing that needs
// QEMU itself (blkdebug disks). It knows nothing of annotations or backoff.
package qemu
