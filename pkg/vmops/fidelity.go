package vmops

import "github.com/crashloop-harness/crashloop/pkg/backoff"

// FidelityRules is every rule of the fidelity list: pkg/backoff's
// (sections A-D and S) followed by this package's (section E, virt-api's
// manual operations), with the rules of Ours.
func FidelityRules() []backoff.FidelityRule {
	return append(backoff.FidelityRules(), manualRules()...)
}

// FidelityMarkdown is FidelityRules rendered as the README's table.
func FidelityMarkdown() string { return backoff.FidelityMarkdown(FidelityRules()) }

func manualRules() []backoff.FidelityRule {
	same := func(id, rule, both string, fromCode bool) backoff.FidelityRule {
		return backoff.FidelityRule{ID: id, Rule: rule, Upstream: both, Ours: both, FromCode: fromCode}
	}
	return []backoff.FidelityRule{
		same("E1", "start: Always, no VMI (its backoff)", "409 Always does not support manual start requests; backoff stands", false),
		same("E2", "start: Always, Running VMI", "409 VM is already running", false),
		same("E3", "start: Once, no VMI", "409 Once does not support manual start requests", false),
		same("E4", "start: RerunOnFailure, Failed VMI", "409 RerunOnFailure does not support starting VM from failed state", false),
		same("E5", "start: RerunOnFailure, Succeeded VMI", "202: {Stop, its UID} and {Start} requests", false),
		same("E6", "start: Manual, Succeeded or Failed VMI", "202: {Stop, its UID} and {Start} requests", false),
		same("E7", "start: Halted, no VMI", "202: runStrategy Always (spec.running true); startFailure kept", true),
		same("E8", "start: Halted, paused", "202: a {Start, paused} request", false),
		same("E9", "start: RerunOnFailure in backoff ({Start} pending)", "500 unable to complete request: stop/start already underway", true),
		same("E10", "start: Manual or RerunOnFailure, no VMI, no pending request", "202: a {Start} request; startFailure removed", true),
		same("E11", "start: VMI Pending/Scheduling/Scheduled", "409 VM is already running", true),
		same("E12", "start: ManualRecoveryRequired condition", "409 VM recovery required: ...", false),
		same("E13", "start/stop/restart: spec.running and spec.runStrategy both set", "500 running and runstrategy are mutually exclusive", true),
		same("E14", "stop: Always, no VMI (its backoff)", "202: runStrategy Halted (spec.running false)", false),
		same("E15", "stop: Once, no VMI", "202: runStrategy Halted", false),
		{ID: "E16", Rule: "stop: RerunOnFailure, no active VMI (its backoff)",
			Upstream:  "409 VM is not running",
			Ours:      "202: runStrategy Halted, pending requests dropped, startFailure removed (the crash-loop change's promise)",
			Deviation: DeviationStopRerunOnFailure},
		same("E17", "stop: Manual, no VMI", "409 VM is not running", false),
		same("E18", "stop: Halted, no VMI", "409 VM is not running", false),
		same("E19", "stop: Halted, VMI Unknown, no grace period", "409 Halted only supports manual stop requests with a shorter graceperiod", false),
		same("E20", "stop: Halted, Running VMI, by grace period", "202 only with a grace period shorter than the VMI's (or the VMI has none)", false),
		same("E21", "stop: Running VMI, Always/Once vs Manual/RerunOnFailure", "202: runStrategy Halted vs a {Stop, its UID} request", false),
		same("E22", "stop: grace period with a live VMI", "the VMI's grace period is patched first, also when the stop is refused", true),
		same("E23", "stop: a {Stop} request while requests are pending", "replaces them", false),
		same("E24", "stop/start/restart: accepted state-change request", "removes status.startFailure", true),
		same("E25", "restart: Always/Manual/RerunOnFailure, no VMI (a backoff)", "409 VM is not running: Halted; backoff stands", false),
		same("E26", "restart: Once", "409 RunStategy Once does not support manual restart requests", false),
		same("E27", "restart: Halted", "409 RunStategy Halted does not support manual restart requests", false),
		same("E28", "restart: Always/Manual/RerunOnFailure, Failed VMI", "202: {Stop, its UID} and {Start} requests", false),
		same("E29", "restart: requests pending", "500 unable to complete request: stop/start already underway", false),
		same("E30", "restart: gracePeriodSeconds above or below 0", "400", true),
		same("E31", "restart: gracePeriodSeconds 0", "202; the launcher is deleted at once", false),
		same("E32", "restart: VolumesChange condition", "409 VM recovery required: ...", false),
		same("E33", "start/stop: WaitAsReceiver", "202, nothing changes", true),
	}
}
