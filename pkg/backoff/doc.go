// Package backoff is the controller-side crash-loop policy of a KubeVirt
// VirtualMachine: how long to wait before starting a new VMI after earlier
// ones failed, how failures are counted and when the count is reset, and
// which printable status a person sees meanwhile.
//
// Everything here is a pure function of kubevirt.io/api/core/v1 values plus
// an injected [Clock] and [Rand]; nothing sleeps, reads the wall clock or
// touches global random state, so tests drive it with a fixed time and a
// seeded source.
//
// # KubeVirt's rules, reproduced
//
// The default [Curve] is [KubeVirt]: interval = max(maxDelay/30, 10 s),
// delay = interval*n² plus uniform[0, delay/2] whole seconds, capped at
// maxDelay (300 s). A failure count of zero is treated as one. Like
// upstream it draws the jitter on every counted failure, also when the cap
// makes it irrelevant, so a seeded source is consumed at upstream's pace.
//
//	failures  1      2      3       4        5        6+
//	delay     10-15  40-60  90-135  160-240  250-300  300   (seconds)
//
// Bookkeeping lives in VirtualMachineStatus.StartFailure, as upstream's
// syncStartFailureStatus, in its order ([Tracker.Sync]):
//   - a VMI that was ever Running clears the record;
//   - a run strategy other than Always, RerunOnFailure or Once clears it
//     (one that cannot be determined does not, as upstream);
//   - a VMI that reached a final phase (Failed or Succeeded) without ever
//     being Running counts once; the same VMI UID is never counted twice;
//   - editing the VM template does not clear it (nothing here looks at it).
//
// What upstream's syncRunStrategy does next (delete the VMI, add
// RerunOnFailure's {action: Start}, wait for the backoff or start) is
// [NextStep]; [TrimFirstRequest] and [StatusRunStrategy] are the rest of
// its status bookkeeping. virt-api's start, stop and restart rules are in
// pkg/vmops.
//
// [PrintableStatus] follows upstream's first-match order restricted to the
// statuses a local controller produces: Stopping, Running, Starting,
// CrashLoopBackOff, Stopped, Unknown.
//
// [FidelityRules] lists every rule with upstream's behaviour and ours;
// [FidelityMarkdown] renders the list as the README's table.
//
// # The one deviation family: exact time
//
// Retry times and [TimeLeft] are exact to the nanosecond, where upstream
// stores whole seconds and subtracts whole Unix seconds
// (upstreamTimeLeftSeconds): --time-scale shrinks delays below a second,
// which whole seconds would erase. The rules it changes are named
// [DeviationExactTime] in [FidelityRules].
//
// # Beyond upstream, each off by default
//
//   - other curves, by name through [Preset]: "kubelet" (10 s doubling to
//     300 s, and a VMI that ran less than 10 minutes still counts as a
//     failure, which is the kubelet's "reset after 10 minutes running"),
//     "kubelet-reduced" (1 s doubling to 60 s, reset after 1 minute), and
//     "systemd" (systemd's RestartSteps: 1 s growing geometrically to 300 s
//     in 5 steps);
//   - [Policy.GiveUpAfter] with [Policy.GiveUpWindow]: stop retrying after N
//     counted failures within the window;
//   - [Policy.CountRunningFailuresWithin]: a VMI that reached Running but
//     ended within the window counts as a failure, and the record is cleared
//     only once a VMI has been Running for the whole window (a reviewer's
//     request on the original KubeVirt change that upstream never did).
//
// # Time scale
//
// [Policy.Scale] multiplies every duration the policy hands out (retry
// delays, windows) so that a schedule that takes ten minutes upstream can be
// checked in seconds with the same formula; the unscaled delay is kept in
// [Change.Delay] so that it can be shown beside the scaled one.
package backoff
