package launcher

import (
	"fmt"
	"strings"
)

// ExitCode is the documented exit status of virt-launcher.
type ExitCode int

// The exit codes of virt-launcher. Keep ExitCodes, the package doc and the
// README in step; a test checks that they agree.
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
	Code    ExitCode
	Phase   string
	Reasons []string
	Meaning string
}

// ExitCodes is the exit code table, in order.
func ExitCodes() []ExitCodeInfo {
	return []ExitCodeInfo{
		{ExitSucceeded, "Succeeded", []string{ReasonGuestShutdown, ReasonStopped}, "the guest powered off, or SIGTERM/SIGINT stopped it (gracefully within the grace period, else destroyed)"},
		{ExitInternal, "Failed", []string{ReasonInternalError}, "an unexpected error in the launcher itself"},
		{ExitPanic, "", nil, "the launcher panicked (Go runtime exit status), including --simulate-crash and launcher-crash faults; no final event"},
		{ExitUsage, "", nil, "bad command line: unknown flag, bad duration, unknown --accel, bad --fault; nothing started"},
		{ExitInputUnreadable, "", nil, "the manifest file is missing or unreadable; nothing started"},
		{ExitInvalidManifest, "", nil, "the manifest is not a VMI the launcher can run: invalid YAML, wrong kind, unknown or unsupported field, nothing to boot, unknown image, bad fault annotation; nothing started"},
		{ExitQemuStartTimeout, "Failed", []string{ReasonQemuStartTimeout}, "the domain was not running within the (jittered) QEMU start timeout; it was destroyed"},
		{ExitLibvirtError, "Failed", []string{ReasonLibvirtError}, "libvirt failed to connect, define or start the domain"},
		{ExitQemuFailed, "Failed", []string{ReasonQemuFailed}, "QEMU exited before the domain was running (refused its configuration, or was killed)"},
		{ExitVMCrashed, "Failed", []string{ReasonVMCrashed, ReasonGuestPanicked}, "QEMU died or the guest kernel panicked after the domain was running"},
	}
}

// Reasons carried by final events.
const (
	ReasonGuestShutdown    = "GuestShutdown"
	ReasonStopped          = "Stopped"
	ReasonInternalError    = "InternalError"
	ReasonQemuStartTimeout = "QemuStartTimeout"
	ReasonLibvirtError     = "LibvirtError"
	ReasonQemuFailed       = "QemuFailed"
	ReasonVMCrashed        = "VMCrashed"
	ReasonGuestPanicked    = "GuestPanicked"
)

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
