package launcherapi

import (
	"fmt"
	"strings"
)

// ExitCode is the documented exit status of virt-launcher.
type ExitCode int

// The exit codes of virt-launcher. What each means, and the final event
// it comes with, is written once: the table ExitCodes returns (the README's copy is
// ExitCodeMarkdown, and a test keeps them equal).
const (
	ExitSucceeded        ExitCode = 0
	ExitInternal         ExitCode = 1
	ExitPanic            ExitCode = 2
	ExitUsage            ExitCode = 3
	ExitInputUnreadable  ExitCode = 4
	ExitInvalidManifest  ExitCode = 5
	ExitQemuStartTimeout ExitCode = 10
	ExitLibvirtError     ExitCode = 11
	ExitQemuFailed       ExitCode = 12
	ExitVMCrashed        ExitCode = 13
)

// ExitCodeInfo documents one exit code.
type ExitCodeInfo struct {
	// Code is the exit status.
	Code ExitCode
	// Phase is the phase of the final event, empty when none is written.
	Phase string
	// Reasons are the final event's possible reasons.
	Reasons []string
	// Meaning says when the launcher exits with Code.
	Meaning string
}

// ExitCodes is the exit code table, in order.
func ExitCodes() []ExitCodeInfo {
	return []ExitCodeInfo{
		{ExitSucceeded, PhaseSucceeded, []string{ReasonGuestShutdown, ReasonStopped}, "the guest powered off, or SIGTERM/SIGINT stopped it (gracefully within the grace period, else destroyed)"},
		{ExitInternal, PhaseFailed, []string{ReasonInternalError}, "an unexpected error in the launcher itself"},
		{ExitPanic, "", nil, "the launcher panicked (Go runtime exit status), including --simulate-crash and launcher-crash faults; no final event"},
		{ExitUsage, "", nil, "bad command line: unknown flag, bad duration, unknown --accel, bad --fault; nothing started"},
		{ExitInputUnreadable, "", nil, "the manifest file is missing or unreadable; nothing started"},
		{ExitInvalidManifest, "", nil, "the manifest is not a VMI the launcher can run: invalid YAML, wrong kind, unknown or unsupported field, nothing to boot, unknown image, bad fault annotation; nothing started"},
		{ExitQemuStartTimeout, PhaseFailed, []string{ReasonQemuStartTimeout}, "the domain was not running within the (jittered) QEMU start timeout; it was destroyed"},
		{ExitLibvirtError, PhaseFailed, []string{ReasonLibvirtError}, "libvirt failed to connect, define or start the domain"},
		{ExitQemuFailed, PhaseFailed, []string{ReasonQemuFailed}, "QEMU exited before the domain was running (refused its configuration, or was killed)"},
		{ExitVMCrashed, PhaseFailed, []string{ReasonVMCrashed, ReasonGuestPanicked}, "QEMU died or the guest kernel panicked after the domain was running"},
	}
}

// ExitCodeMarkdown renders the exit code table for the README.
func ExitCodeMarkdown() string {
	var b strings.Builder
	b.WriteString("| exit | phase | reason | meaning |\n| --- | --- | --- | --- |\n")
	for _, c := range ExitCodes() {
		phase, reasons := c.Phase, strings.Join(c.Reasons, ", ")
		if phase == "" {
			phase = "-"
		}
		if reasons == "" {
			reasons = "-"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", c.Code, phase, reasons, c.Meaning)
	}
	return b.String()
}
