// Package qemu runs a libvirt domain: the libvirt connection (the embedded
// QEMU driver under a per-VMI root by default, with a shared QEMU
// capability cache), lifecycle events, reaping of the process's children,
// the serial console and the fault plumbing that needs QEMU itself
// (blkdebug disks). Turning a VMI into the domain is pkg/converter's job;
// this package knows nothing of KubeVirt types, annotations or backoff.
package qemu
