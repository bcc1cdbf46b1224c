// Package cpupin pins every thread of this process to one CPU.
//
// libvirt keeps QEMU's capabilities in a cache and discards it when the
// host's CPUID differs from the one it recorded. On hosts whose CPUs report
// different CPUID (seen on PVM guests: CPU 0 and CPU 1 differ), a launcher
// that happens to run on another CPU than the last probe re-probes QEMU,
// which costs seconds. Running the libvirt part always on the same CPU, the lowest
// of its allowed set, keeps the signature stable. libvirt gives a domain's
// QEMU the affinity of all online CPUs when the domain has no cpuset, so
// the guest itself is not left pinned.
package cpupin

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Lowest pins every thread of this process to the lowest CPU of the
// process's allowed set and returns that CPU. Threads created later inherit
// the affinity of the thread that creates them, so calling it early (an
// init function, before libvirt starts threads) covers the whole process.
func Lowest() (int, error) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return -1, fmt.Errorf("reading this process's CPU affinity: %w", err)
	}
	cpu := -1
	for i := 0; i < len(allowed)*64; i++ {
		if allowed.IsSet(i) {
			cpu = i
			break
		}
	}
	if cpu < 0 {
		return -1, fmt.Errorf("this process may run on no CPU")
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return -1, fmt.Errorf("pinning to CPU %d: %w", cpu, err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1, fmt.Errorf("listing this process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread may have exited since the listing: not an error.
		if err := unix.SchedSetaffinity(tid, &one); err != nil && err != unix.ESRCH {
			return -1, fmt.Errorf("pinning thread %d to CPU %d: %w", tid, cpu, err)
		}
	}
	return cpu, nil
}
