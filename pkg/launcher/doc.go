// Package launcher owns one VMI's launch: its phases, the jittered QEMU
// start timeout, signals and the grace period, the event stream, and the
// guarantee that nothing it started outlives it. It does not parse faults
// (pkg/faults decides them; the command turns decisions into Injections)
// and does not build XML (pkg/qemu does).
//
// # Lifecycle
//
//	Scheduled ──▶ [crash before-libvirt] ──▶ libvirt open ──▶ [crash before-define]
//	    │                                                        │
//	    │        [libvirt-error define] ◀── define ◀─────────────┘
//	    │                                     │
//	    │        [crash before-start] ──▶ [libvirt-error start] ──▶ start (paused for qemu-hang/slow-start)
//	    │                                                              │
//	    │  start timeout (base + uniform[0,jitter)) armed at Scheduled │
//	    ▼                                                              ▼
//	Failed/QemuStartTimeout ◀── timer fires while not running    Running ──▶ [crash after-running]
//	                                                                   │      GuestReady (console marker)
//	                                                                   │      [qemu-kill after N]
//	          Succeeded/GuestShutdown ◀── guest powers off ◀───────────┤
//	          Failed/GuestPanicked   ◀── pvpanic, libvirt "crashed" ◀──┤
//	          Failed/VMCrashed       ◀── QEMU dies ◀───────────────────┤
//	          Succeeded/Stopped      ◀── SIGTERM/SIGINT: ACPI power button, destroy after the grace period
//
// Run returns once the domain is gone; its deferred cleanup destroys and
// undefines the domain, saves QEMU's capability cache and removes the
// per-VMI libvirt root. A launcher that dies without running that cleanup
// (SIGKILL, a crash fault) is covered by its reaper: a child process in its
// own process group that holds a pipe from the launcher, and on EOF without
// a "done" line kills the domain's QEMU and removes the root.
//
// # Events
//
// One JSON object per line (Event): time (RFC 3339, nanoseconds, UTC),
// event, vmi, namespace, uid, phase, attempt, and reason, message and
// exitCode on the final event. Event names: Scheduled, FaultFired, Running,
// GuestReady, Succeeded, Failed. Running means QEMU is up and the vCPUs
// run (KubeVirt's meaning), not that the guest booted; GuestReady is the
// guest's readiness marker on the serial console.
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
// ExitCodes is the same table as data; a test keeps it, the fault catalog
// and the README in step.
package launcher
