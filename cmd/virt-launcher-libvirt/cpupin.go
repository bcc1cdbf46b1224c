package main

import (
	"fmt"
	"os"

	"github.com/crashloop-harness/crashloop/pkg/cpupin"
)

// init pins the libvirt part to one CPU before libvirt or the Go runtime
// multiply threads, so that libvirt sees the same host CPUID at every
// launch and keeps its QEMU capability cache (see pkg/cpupin). QEMU gets
// all online CPUs from libvirt.
func init() {
	if _, err := cpupin.Lowest(); err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher: %v (QEMU capabilities may be probed again)\n", err)
	}
}
