// Package launcherapi is the contract between virt-launcher and every
// process that runs it (the local controller, cluster-lite's node agent,
// the functional suites, the benchmarks): the event lines it writes, its
// phases and reasons, its exit codes, its command line, the layout of a
// launch folder, the QEMU start timeout with its one draw, and the seed.
//
// It is written once and imported by both sides, in the pattern of
// KubeVirt's pkg/handler-launcher-com and Nomad's plugins/drivers. It is a
// leaf: it imports no other package of this module and builds without cgo
// (CGO_ENABLED=0), so a caller never links libvirt to talk to a launcher.
//
// # Events
//
// One JSON object per line on the launcher's stdout (Event): time (RFC
// 3339, nanoseconds, UTC), event, vmi, namespace, uid, phase, attempt, and
// reason, message and exitCode on the final event. Event names: Scheduled,
// FaultFired, Running, GuestReady, Succeeded, Failed. Running means QEMU is
// up and the vCPUs run (KubeVirt's meaning), not that the guest booted;
// GuestReady is the guest's readiness marker on the serial console.
//
// # Exit codes
//
//	0  Succeeded          the guest powered off, or SIGTERM/SIGINT stopped it
//	1  Failed             InternalError: an unexpected error in the launcher
//	2  (none)             Go panic, including --simulate-crash; no final event
//	3  (none)             usage: bad flag or value; nothing started
//	4  (none)             the manifest is missing or unreadable; nothing started
//	5  (none)             the manifest is not a runnable VMI (or a bad fault annotation)
//	10 Failed             QemuStartTimeout
//	11 Failed             LibvirtError: connect, define or start failed
//	12 Failed             QemuFailed: QEMU exited before the domain was running
//	13 Failed             VMCrashed or GuestPanicked after Running
//
// ExitCodes is the same table as data; the README's copy is tested against
// it.
package launcherapi
