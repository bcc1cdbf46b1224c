// Package launcherapi is the contract between virt-launcher and every
// process that runs it (the local controller, cluster-lite's node agent,
// the functional suites, the benchmarks): the event lines it writes, its
// phases and reasons, its exit codes, its command line, the layout of a
// launch folder, the QEMU start timeout with its one draw, and the seed.
// What the launcher's own stages hand each other is not here but in
// internal/launchplan.
//
// It is written once and imported by both sides, in the pattern of
// KubeVirt's pkg/handler-launcher-com and Nomad's plugins/drivers. It is a
// leaf: it imports no other package of this module and builds without cgo
// (CGO_ENABLED=0), so a caller never links libvirt to talk to a launcher.
//
// # Events
//
// One JSON object per line on the launcher's stdout (Event): version
// (EventVersion; a reader refuses another), time (RFC 3339, nanoseconds,
// UTC), event, vmi, namespace, uid, phase, attempt, reason, message and
// exitCode on the final event, and the typed values of Scheduled, Running
// and FaultFired events. Event names: Scheduled,
// FaultFired, Running, GuestReady, Succeeded, Failed. Running means QEMU is
// up and the vCPUs run (KubeVirt's meaning), not that the guest booted;
// GuestReady is the guest's readiness marker on the serial console.
//
// # Exit codes
//
// ExitCodes is the exit code table: each code, the phase and reasons of
// the final event that comes with it, and what it means. The README's
// copy is tested against it.
package launcherapi
