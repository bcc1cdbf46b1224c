// Package hypervisor is the seam between one launch's lifecycle
// (pkg/launcher) and the hypervisor that runs its domain (pkg/qemu, through
// libvirt): the few operations the lifecycle needs and the lifecycle events
// it follows. It is a leaf without cgo, so the lifecycle can be unit-tested
// with a fake domain and a fake clock, without libvirt, in the way of
// KubeVirt's DomainManager and Nomad's DriverPlugin.
package hypervisor

import (
	"syscall"

	"libvirt.org/go/libvirtxml"
)

// Session is one connection to a hypervisor.
type Session interface {
	// Define registers the domain and subscribes to its lifecycle events.
	// Nothing runs yet.
	Define(dom *libvirtxml.Domain) (Domain, error)
	// Close disconnects (and saves what the session caches).
	Close() error
}

// Domain is a defined domain and, once started, its QEMU process.
type Domain interface {
	// Start boots the domain; paused leaves QEMU up with its vCPUs stopped
	// until Resume.
	Start(paused bool) error
	// QEMUStarted tells, after a failed Start, whether QEMU itself was
	// started (and refused), as opposed to the hypervisor failing first.
	QEMUStarted() bool
	// Running tells whether the domain's vCPUs run now.
	Running() (bool, error)
	// Resume starts the vCPUs of a paused domain.
	Resume() error
	// Shutdown presses the guest's ACPI power button.
	Shutdown() error
	// Destroy stops QEMU at once; a domain that is not running is no error.
	Destroy() error
	// Release undefines the domain and stops its events, once it stopped.
	Release() error
	// Kill sends sig to the domain's QEMU process.
	Kill(sig syscall.Signal) error
	// Events delivers the domain's lifecycle events.
	Events() <-chan Event
	// Exited delivers QEMU's wait status once, when this process reaps it
	// (QEMU is a descendant reparented to it); nil when it cannot (an
	// external daemon's QEMU), which a select never picks.
	Exited() <-chan syscall.WaitStatus
}

// EventKind is the kind of a domain lifecycle event.
type EventKind string

// Lifecycle event kinds, as libvirt reports them.
const (
	EventStarted   EventKind = "Started"
	EventSuspended EventKind = "Suspended"
	EventResumed   EventKind = "Resumed"
	EventStopped   EventKind = "Stopped"
	EventShutdown  EventKind = "Shutdown"
	EventCrashed   EventKind = "Crashed"
	EventOther     EventKind = "Other"
)

// StopReason says why a domain stopped.
type StopReason string

// Stop reasons, from libvirt's stopped-event details.
const (
	StopShutdown  StopReason = "shutdown"  // the guest powered off
	StopDestroyed StopReason = "destroyed" // destroyed on request
	StopCrashed   StopReason = "crashed"   // the guest crashed (e.g. kernel panic via pvpanic)
	StopFailed    StopReason = "failed"    // QEMU died unexpectedly
	StopOther     StopReason = "other"
)

// Event is one lifecycle event of a domain.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Reason is set for EventStopped.
	Reason StopReason
	// Panicked is set for EventCrashed when the guest reported a panic.
	Panicked bool
}
