// Package launcher owns one VMI's launch once pkg/launchprep has turned
// the VMI into a run plan (launchplan.RunPlan): its assembly (Launch: the
// reaper taken over, reaping of the process's children, the seed, start
// timeout and grace period, the faults' edits of the domain), its
// lifecycle (Run: phases, the start timeout, signals and the grace period,
// the event stream) and the guarantee that nothing it started outlives it. The lifecycle is drawn once in hooks.go, with one
// small hook interface per point where a fault acts; faults.go says where
// each fault of pkg/faults acts. The lifecycle works on the hypervisor
// seam (pkg/hypervisor), which pkg/qemu implements with libvirt, so it is
// unit-tested with a fake domain and a fake clock. The launcher's contract
// with its runners (events, exit codes, command line) is pkg/launcherapi.
//
// Run returns once the domain is gone; its deferred cleanup destroys and
// undefines the domain and closes the session, which saves QEMU's
// capability cache; Launch then removes the per-VMI libvirt root. A
// launcher that dies without running that cleanup (SIGKILL, a crash
// fault) is covered by its reaper (pkg/watchdog): a child process in its
// own process group, started by the converter stage, that holds a pipe
// from the launcher, and on EOF without a "done" line kills the domain's
// QEMU and removes the root. This package links libvirt (through
// pkg/qemu) and none of the Kubernetes and KubeVirt types.
package launcher
