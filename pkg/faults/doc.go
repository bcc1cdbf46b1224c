// Package faults is the fault catalog of virt-launcher: it parses the faults a
// VMI asks for (annotations) or a run asks for (repeatable --fault flags) into
// a Plan, validates them, and decides which of them fire on a given launch
// attempt. Of this repository it imports only pkg/launcherapi (the
// launcher's exit codes, phases, reasons and seed) and it makes no libvirt
// calls: the launcher applies the faults, each at its lifecycle Point.
// Everything here is pure and deterministic.
//
// # Grammar
//
// One grammar serves annotations and flags. An annotation key is
// AnnotationPrefix followed by the fault name; its value is a term:
//
//	term  = [P "%"] [N "*"] [param "=" value {"," param "=" value}]
//	P     = probability in percent, 0 to 100, digits with an optional fraction (default 100)
//	N     = count: the most times the fault fires across the attempts of one VM (default unlimited)
//	param = a parameter of the fault (see the catalog) or a modifier:
//	        delay=<duration>   wait before the action (default 0s)
//	        attempts=<set>     attempts it applies to: 2, 1-3, 4-, 1,3,5 or all (default all)
//
// A flag is "--fault <fault>[=<term>]". Whitespace around the term and its
// items is ignored; enum, signal and errno values are matched in any case.
// Because attempts lists use commas too, an item without "=" right after
// attempts=... continues the list. Examples:
//
//	faults.crashloop.dev/qemu-kill: "30%2*signal=SIGTERM,after=5s,attempts=1-3"
//	faults.crashloop.dev/qemu-hang: ""              (always, unlimited)
//	faults.crashloop.dev/guest-panic: "after=3s,attempts=1,3,5"
//	--fault qemu-kill=50%signal=kill
//	--fault 'qemu-hang=2*'
//	--fault disk-io-error=op=all,errno=ENOSPC
//
// Annotations without the prefix are ignored, so a VMI that asked for no
// fault never gets one. Everything else that is wrong is an *Error naming the
// source (annotation "faults.crashloop.dev/qemu-kil" or --fault "..."), the
// bad part and what is allowed: an unknown fault or parameter, a missing
// required or repeated parameter, a bad probability, count, duration, signal,
// errno or attempts set, and a fault asked for twice (annotation and flag, or
// two flags). Spec.String and Spec.Value render a canonical term that parses
// back to the same Spec.
//
// The KubeVirt functional-test annotation FailFastAnnotation is not part of
// the grammar; WantsSimulatedCrash reports it.
//
// # Delay and after
//
// For faults without an `after` parameter, delay is how long the launcher
// waits at the fault's lifecycle point before acting. For faults with `after`
// (qemu-slow-start, qemu-kill, guest-panic, guest-poweroff,
// launcher-socket-unresponsive), delay is added
// to after: the typed action carries after+delay as After, and the launcher
// waits only once. guest-panic and guest-poweroff count inside the guest in
// whole seconds, so their after and delay must be whole seconds.
//
// # Decisions
//
// Plan.Decide takes a DecideInput{Seed, Key, Attempt}. A fault fires on
// attempt A iff A is in its attempts set, its probability draw for A
// succeeds, and, with a count N, fewer than N of the attempts 1..A-1 fired by
// the same two rules. Each draw comes from a math/rand/v2 PCG seeded with
// SHA-256 of (seed, key, fault name, attempt), so the count needs no stored
// state: earlier attempts are replayed. Key is the VM identity,
// namespace/name, and not the VMI UID: the controller makes a new VMI with a
// fresh UID for every attempt, so a UID-keyed count could never be kept.
// Same seed, key and attempt always give the same Decisions.
//
// # Catalog
//
// Exit codes are virt-launcher's (launcherapi.ExitCode). MarkdownTable renders the
// same table for the README from Catalog.
//
//	fault            params (default)                       acts at                      outcome
//	launcher-crash   at=before-libvirt|before-define|       launcher, at `at`            panic: no final event, exit 2
//	                    before-start|after-running
//	                    (before-libvirt)
//	libvirt-error    at=define|start (start)                libvirt call                 Failed LibvirtError, exit 11
//	qemu-hang        -                                      domain start (paused)        Failed QemuStartTimeout, exit 10
//	qemu-slow-start  after=<duration> (required)            domain start (paused)        Running if resumed in time, else
//	                                                                                     Failed QemuStartTimeout, exit 10
//	qemu-kill        signal=SIGKILL|SIGTERM|SIGSEGV|        after domain start           before Running: Failed QemuFailed, exit 12;
//	                   SIGABRT|SIGINT|SIGQUIT|SIGHUP|SIGBUS                              after Running: Failed VMCrashed, exit 13
//	                 after=<duration> (0s)
//	qemu-bad-config  -                                      domain XML (kernel path)     Failed QemuFailed, exit 12
//	guest-panic      after=<whole seconds> (0s)             guest: harness.panic=N       Failed GuestPanicked, exit 13
//	guest-poweroff   after=<whole seconds> (0s)             guest: harness.poweroff=N    Succeeded GuestShutdown, exit 0
//	guest-noready    -                                      guest: harness.noready       stays Running
//	disk-io-error    disk=<name> (first disk)               domain XML (blkdebug),       stays Running; guest prints
//	                 op=read|write|all (read)               guest: harness.readdisk      HARNESS-DISK-READ-ERROR
//	                 errno=5|22|28, or EIO|EINVAL|ENOSPC (5)
//	launcher-socket-unresponsive after=<duration> (0s), for=<duration> (required)
//	                 acts at the pod's command socket from Running (KubeVirt mode's monitor); stays Running,
//	                 virt-handler's dials refused for `for`
package faults
