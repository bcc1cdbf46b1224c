package backoff

import (
	"fmt"
	"strings"
)

// Deviation names. A FidelityRule with an empty Deviation behaves as
// upstream does.
const (
	// DeviationExactTime: retry times and the time left are kept to the
	// nanosecond instead of upstream's whole Unix seconds, because
	// --time-scale shrinks delays below a second.
	DeviationExactTime = "exact-time"
	// DeviationPhases: a VMI whose launcher dies before reporting
	// Scheduled goes from Scheduling straight to Failed.
	DeviationPhases = "phases"
	// DeviationRetryCadence: a launcher that cannot be created is retried
	// on a fixed doubling schedule, not a work queue's rate limiter.
	DeviationRetryCadence = "retry-cadence"
)

// FidelityRule is one rule of KubeVirt v1.6.0's crash-loop behaviour, as
// its unit tests or its code state it, next to what this project does.
type FidelityRule struct {
	// ID names the rule: a section letter (A curve, B time left,
	// C counting, D printable status, E manual operations, S run strategy
	// sync, H KubeVirt's virt-handler on our node) and a number.
	ID string
	// Rule says what situation the rule is about.
	Rule string
	// Upstream is KubeVirt v1.6.0's behaviour.
	Upstream string
	// Ours is this project's behaviour.
	Ours string
	// Deviation is empty when Ours is Upstream's behaviour, else the
	// deviation's name (see the Deviation constants here and in pkg/vmops).
	Deviation string
	// FromCode is true when upstream has no unit test of its own for the
	// rule and it is read from the code.
	FromCode bool
	// Later is what later KubeVirt releases did where the rule was run
	// on them, oldest first; empty where no later release was run.
	Later []ReleaseResult
}

// LaterSame is a ReleaseResult's Result when the release behaves as
// Upstream (v1.6.0) says.
const LaterSame = "same"

// ReleaseResult is one later KubeVirt release's behaviour for a rule, as
// the spec that checks the rule observed it with that release's
// components (make clusterlite KUBEVIRT_VERSION=...).
type ReleaseResult struct {
	// Release is the KubeVirt release, vMAJOR.MINOR.PATCH.
	Release string
	// Result is LaterSame or what the release does instead.
	Result string
}

// Verdict is "same" or the deviation's name.
func (r FidelityRule) Verdict() string {
	if r.Deviation == "" {
		return "same"
	}
	return r.Deviation
}

// FidelityRules lists the rules of sections A-D and S (the controller's
// side) and H (the node side under KubeVirt's virt-handler), in order. pkg/vmops adds section E (virt-api's side).
func FidelityRules() []FidelityRule {
	curve := func(id string, n int, lo, hi string) FidelityRule {
		rule := fmt.Sprintf("backoff delay, failure count %d", n)
		if n == 0 {
			rule += " (taken as 1)"
		}
		d := lo + "-" + hi + " s"
		if lo == hi {
			d = lo + " s (the cap)"
		}
		return FidelityRule{ID: id, Rule: rule, Upstream: d, Ours: d}
	}
	same := func(id, rule, both string, fromCode bool) FidelityRule {
		return FidelityRule{ID: id, Rule: rule, Upstream: both, Ours: both, FromCode: fromCode}
	}
	return withLater(append([]FidelityRule{
		curve("A1", 0, "10", "15"),
		curve("A2", 1, "10", "15"),
		curve("A3", 2, "40", "60"),
		curve("A4", 3, "90", "135"),
		curve("A5", 4, "160", "240"),
		curve("A6", 5, "250", "300"),
		curve("A7", 6, "300", "300"), // and every count above
		same("A8", "jitter distribution", "uniform over the whole seconds [0, base/2], then capped at 300 s (failure 5: 300 s with p = 76/126)", true),
		same("A9", "jitter draws", "one draw per counted failure, also when the delay is capped", true),

		same("B1", "time left without a start failure", "0", false),
		same("B2", "time left, retry 300 s ahead", "300 s", false),
		same("B3", "time left, retry 300 s past", "0", false),
		{ID: "B4", Rule: "time left, retry 0.8 s ahead within the same second", Upstream: "0: start allowed", Ours: "800 ms", Deviation: DeviationExactTime, FromCode: true},
		{ID: "B5", Rule: "time left, retry 0.2 s ahead across a second boundary", Upstream: "1 s", Ours: "200 ms", Deviation: DeviationExactTime, FromCode: true},
		same("B6", "time left, retry 10 s ahead on whole seconds", "10 s", true),
		{ID: "B7", Rule: "start failure without a retry time", Upstream: "panics (never written)", Ours: "0", Deviation: DeviationExactTime, FromCode: true},
		{ID: "B8", Rule: "retry time written on a counted failure", Upstream: "now + delay, RFC 3339 whole seconds in the API", Ours: "now + scaled delay, to the nanosecond", Deviation: DeviationExactTime, FromCode: true},

		same("C1", "Always, first VMI fails without Running", "count 1, its UID, a retry time; the VMI is deleted", false),
		same("C2", "Always, a new VMI fails without Running", "count 2, the new UID, a new retry time; the VMI is deleted", false),
		same("C3", "Always, VMI reaches Running", "record cleared; the VMI stays", false),
		same("C4", "Halted, VMI Failed", "record cleared; the VMI is deleted", false),
		same("C5", "Always, VMI Failed", "counted; the VMI is deleted", false),
		same("C6", "Manual, VMI Failed", "record cleared; the VMI stays", false),
		same("C7", "RerunOnFailure, VMI Failed", "counted; the VMI is deleted and {action: Start} added", false),
		same("C8", "Once, VMI Failed", "counted; the VMI stays (Once never restarts)", false),
		same("C9", "same VMI UID as the last counted failure", "unchanged", true),
		same("C10", "no VMI, Always/RerunOnFailure/Once", "unchanged", true),
		same("C11", "no VMI, Halted/Manual/WaitAsReceiver", "record cleared", true),
		same("C12", "VMI Succeeded without Running", "counted like Failed", true),
		same("C13", "VMI Failed after Running", "record cleared, no backoff", true),
		same("C14", "VMI Pending/Scheduling/Scheduled/Unknown, never Running", "unchanged", true),
		same("C15", "VMI phase Running without a Running transition timestamp", "not cleared (the rule reads phaseTransitionTimestamps)", true),
		same("C16", "spec.running and spec.runStrategy both set", "record not cleared; a VMI that failed early is still counted", true),
		same("C17", "first failure after a clear", "count restarts at 1", true),
		same("C18", "VM template edited during backoff", "record kept", true),
		same("C19", "launcher cannot be created", "VMI stays Pending with Synchronized=False reason FailedCreate; not counted", true),

		same("D1", "printable status: Always, no VMI, count > 0", "CrashLoopBackOff", false),
		same("D2", "printable status: RerunOnFailure, no VMI, count > 0", "CrashLoopBackOff", false),
		same("D3", "printable status: Halted, no VMI, count > 0", "Stopped", false),
		same("D4", "printable status: Manual, no VMI, count > 0", "Stopped", false),
		same("D5", "printable status: Once, Running VMI, count > 0", "Running", false),
		same("D6", "printable status: Always, Running VMI, count > 0", "Running", false),
		same("D7", "printable status: Once, no VMI, count > 0", "CrashLoopBackOff", true),
		same("D8", "printable status: Once, Failed VMI, count > 0", "CrashLoopBackOff", true),
		same("D9", "printable status: Always, Failed VMI, count > 0", "CrashLoopBackOff", true),
		same("D10", "printable status: Always, no VMI, start expected, count > 0", "Starting", true),
		same("D11", "printable status: Always, VMI Pending/Scheduling/Scheduled, count > 0", "Starting", true),
		same("D12", "printable status: RerunOnFailure, Succeeded VMI that never ran, count > 0", "CrashLoopBackOff (never retried)", true),
		same("D13", "printable status: Always, no VMI, count 0", "Stopped", true),

		same("S1", "Always, no VMI, pending start request, backoff running", "waits for the backoff (the request does not skip it)", true),
		same("S2", "RerunOnFailure, no VMI, {action: Start} pending, backoff running", "waits for the backoff, the request stays", true),
		same("S3", "RerunOnFailure, no VMI, no request, status.runStrategy RerunOnFailure", "no start", true),
		same("S4", "Halted, no VMI, pending start request", "spec turns to Always", true),
		same("S5", "Once, no VMI", "starts at once, no backoff check", true),
		same("S6", "first state-change request trimmed", "start: once a live VMI exists; stop: once its VMI is gone", true),
		same("S7", "status.runStrategy", "empty until a VMI has existed", true),
		{ID: "S8", Rule: "phases of a VMI whose launcher crashes at once (fail-fast)", Upstream: "Pending → Scheduling (pod created) → … → Failed",
			Ours: "Pending → Scheduling (launcher process spawned) → Failed: the launcher dies before it reports Scheduled", Deviation: DeviationPhases, FromCode: true},
		{ID: "S9", Rule: "launcher that cannot be created, retried", Upstream: "through the VMI controller's rate-limited work queue",
			Ours: "the same Pending VMI after 1 s, doubling to 60 s (scaled)", Deviation: DeviationRetryCadence, FromCode: true},
	}, virtHandlerRules()...))
}

// virtHandlerRules are section H: KubeVirt's own virt-handler on
// cluster-lite's node (clusterlite up --node-side virt-handler) around our
// KubeVirt-mode launcher and our kubelet. Upstream's side is read from
// virt-handler's code; ours is what the cluster lane's spec observes with
// virt-handler v1.6.0 itself (functests/cluster/virthandler_restart_test.go,
// virthandler_start_test.go),
// which checks each clause of the text.
func virtHandlerRules() []FidelityRule {
	both := func(id, rule, text string) FidelityRule {
		return FidelityRule{ID: id, Rule: rule, Upstream: text, Ours: text, FromCode: true}
	}
	return []FidelityRule{
		both("H1", "virt-handler SIGKILLed and restarted while a VMI runs",
			"the VMI stays Running (every watch event), the same QEMU process, no new VMI or pod: the restarted virt-handler's domain informer lists each launcher's domain "+
				"(GetDomain on its socket) before its VMI workers start. A Running VMI whose domain is missing from that list is failed "+
				"(kubevirt/kubevirt#18763, #18765: after a migration, or with an unreachable socket)"),
		both("H2", "virt-handler SIGKILLed and restarted while a VMI's QEMU starts (its Sync in flight)",
			"the VMI stays Scheduled after the start has ended, until virt-handler's next domain resync (--domain-resync-period-seconds, 300 s by default), "+
				"then Running with the same QEMU, no new VMI or pod. The restarted virt-handler lists the domain Paused/StartingUp, which its isMigrationInProgress "+
				"takes for a migration, so the VMI's key is dropped unlogged (V(4)); its launcher client, and with it the VMI's domain-notify pipe, is made only in a sync, "+
				"so the launcher's Running event reaches no one; the resync's GetDomain reads it"),
		both("H3", "a Sync slower than virt-handler's 20 s gRPC deadline (the launcher's start held 25 s)",
			"the Sync fails with DeadlineExceeded; the next sync finds the domain Shutoff/Unknown, as the launcher's defined-domain event left it, takes it for inactive "+
				"and deletes it: DeleteDomain waits for the start and undefines the now running domain, then virt-handler's final cleanup unmounts the VMI's containerDisks "+
				"and closes its notify pipe. The guest runs on and the VMI stays Scheduled, virt-handler retrying its start (\"containerdisk scratch not yet ready\") "+
				"(kubevirt/kubevirt#17367; a domain resync inside the Sync's 20 s would put Paused/StartingUp in the cache first and avoid it)"),
		both("H4", "a Running VMI's launcher command socket refusing dials past virt-handler's 30 s stale-socket watchdog (its guest running on)",
			"the watchdog, dialing every launcher socket of its ghost records every 11 s, warns 33 to 44 s after the first refused dial, pushes a domain "+
				"with a deletion timestamp into its domain informer and marks the socket launcher-unresponsive for good; the VMI, Running without a domain, is Failed "+
				"at once (Ready: GuestNotRunning) while its guest still runs, its containerDisks are unmounted, and it stays Failed, its guest still running in the pod, "+
				"when the socket answers again. Refusals shorter than 30 s change nothing. The watchdog is unchanged on main; "+
				"kubevirt/kubevirt#17752 (release-1.9) covers another path, an unreachable socket at the informer's re-list, kept as an Unknown domain"),
		both("H5", "a launcher that died before its command socket, its container kept (fail-fast with keep-launcher-alive-after-failure)",
			"the VMI stays Scheduled while virt-handler looks for the socket every second, and is Failed 3 minutes after its first look "+
				"(IsLauncherClientUnresponsive: a pod folder without a socket is given 3 minutes to initialize); no Sync is attempted, no new pod"),
	}
}

// laterResults are the rules' results on later KubeVirt releases, by rule
// ID: what the rule's spec observed with that release's components
// (make clusterlite KUBEVIRT_VERSION=vX.Y.Z, the lane with
// CLUSTERLITE_BIN_DIR at its folder; tools/clusterlite/kubevirt/VIRT-HANDLER.md
// section 6 has the runs).
func laterResults() map[string][]ReleaseResult {
	return map[string][]ReleaseResult{
		"H1": {{Release: "v1.7.0", Result: LaterSame + "; its domain informer now lists only the sockets of its ghost records, " +
			"checkpoints under /var/run/kubevirt-private that outlive the restart, not every launcher socket under /pods (kubevirt/kubevirt#15323)"}},
		"H2": {{Release: "v1.7.0", Result: LaterSame + " (Running at the first domain resync after the start's end)"}},
		"H3": {{Release: "v1.7.0", Result: LaterSame + "; fixed on main only (kubevirt/kubevirt#18545, not in v1.8.4)"}},
		"H4": {{Release: "v1.7.0", Result: LaterSame + " (watchdog's warning 36.6 s after the first refused dial, Failed 0.2 s later, the guest running)"}},
		"H5": {{Release: "v1.7.0", Result: LaterSame + " (Failed 3 min 0.2 s after Scheduled)"}},
	}
}

// withLater sets each rule's Later from laterResults.
func withLater(rules []FidelityRule) []FidelityRule {
	later := laterResults()
	for i := range rules {
		rules[i].Later = later[rules[i].ID]
	}
	return rules
}

// FidelityMarkdown renders rules as a Markdown table: rule, what, KubeVirt
// v1.6.0, ours, and "same" or the deviation. A rule read from upstream's
// code rather than its unit tests is marked "(code)". When any rule has a
// later release's result, a last column "Later releases" gives them
// ("v1.7.0: same"), empty for rules not run on a later release.
func FidelityMarkdown(rules []FidelityRule) string {
	later := false
	for _, r := range rules {
		later = later || len(r.Later) > 0
	}
	var b strings.Builder
	b.WriteString("| Rule | Situation | KubeVirt v1.6.0 | Ours | Verdict |")
	sep := "|---|---|---|---|---|"
	if later {
		b.WriteString(" Later releases |")
		sep += "---|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, r := range rules {
		id := r.ID
		if r.FromCode {
			id += " (code)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |",
			cell(id), cell(r.Rule), cell(r.Upstream), cell(r.Ours), cell(r.Verdict()))
		if later {
			fmt.Fprintf(&b, " %s |", cell(laterText(r.Later)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// laterText is a rule's later results as one cell: "v1.7.0: same; ...".
func laterText(later []ReleaseResult) string {
	parts := make([]string, 0, len(later))
	for _, l := range later {
		parts = append(parts, l.Release+": "+l.Result)
	}
	return strings.Join(parts, "; ")
}

// cell escapes a table cell's pipes and line breaks.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
