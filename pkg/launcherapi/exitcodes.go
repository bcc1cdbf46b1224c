package launcherapi

import (
	"fmt"
	"strings"
)

// ExitCode is the documented exit status of virt-launcher.
type ExitCode int

// The exit codes of virt-launcher.
const (
	ExitSucceeded        ExitCode = 0  // phase Succeeded: the guest powered off, or it was stopped on request
	ExitInternal         ExitCode = 1  // phase Failed: an unexpected error in the launcher itself
	ExitPanic            ExitCode = 2  // the launcher panicked (Go runtime), including --simulate-crash; no final event
	ExitUsage            ExitCode = 3  // bad flags or flag values; nothing started
	ExitInputUnreadable  ExitCode = 4  // the manifest file is missing or unreadable; nothing started
	ExitInvalidManifest  ExitCode = 5  // the manifest is not a VMI the launcher can run (or a fault annotation is bad); nothing started
	ExitQemuStartTimeout ExitCode = 10 // phase Failed, reason QemuStartTimeout: the domain was not running within the start timeout
	ExitLibvirtError     ExitCode = 11 // phase Failed, reason LibvirtError: libvirt refused to connect, define or start
	ExitQemuFailed       ExitCode = 12 // phase Failed, reason QemuFailed: QEMU exited before the domain was running
	ExitVMCrashed        ExitCode = 13 // phase Failed, reason VMCrashed or GuestPanicked: QEMU died or the guest panicked after Running
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

// Info returns the table row of c, and whether c is a documented code.
func (c ExitCode) Info() (ExitCodeInfo, bool) {
	for _, row := range ExitCodes() {
		if row.Code == c {
			return row, true
		}
	}
	return ExitCodeInfo{}, false
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
