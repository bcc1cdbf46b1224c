package controller

import "github.com/crashloop-harness/crashloop/pkg/launcherapi"

// EventKind names an Event: one of the controller's own changes, or a
// launcher event passed on under the contract's name (launcherapi).
type EventKind string

// The controller's own events.
const (
	// EventControllerStarted opens a run: policy, seed, time scale, state
	// folder.
	EventControllerStarted EventKind = "ControllerStarted"
	// EventStarted is a new VMI with its launcher.
	EventStarted EventKind = "Started"
	// EventFailedCreate is a launcher that could not be started: the VMI
	// stays Pending with a FailedCreate condition, is not counted, and
	// the launcher is retried.
	EventFailedCreate EventKind = "FailedCreate"
	// EventExited is the end of a launcher process, with its exit code.
	EventExited EventKind = "Exited"
	// EventBackoffPlanned is a counted failure and the delay drawn for it.
	EventBackoffPlanned EventKind = "BackoffPlanned"
	// EventGaveUp is a counted failure after which the give-up rule stops
	// the retries.
	EventGaveUp EventKind = "GaveUp"
	// EventRecordCleared is the start-failure record cleared (the VMI ran
	// long enough, or a manual operation).
	EventRecordCleared EventKind = "RecordCleared"
	// EventStopRequested, EventStartRequested and EventRestartRequested
	// are the manual operations.
	EventStopRequested    EventKind = "StopRequested"
	EventStartRequested   EventKind = "StartRequested"
	EventRestartRequested EventKind = "RestartRequested"
	// EventManifestChanged is a reloaded manifest file; EventManifestInvalid
	// one that changed but does not parse.
	EventManifestChanged EventKind = "ManifestChanged"
	EventManifestInvalid EventKind = "ManifestInvalid"
	// EventAdopted is a launcher left by an earlier controller run.
	EventAdopted EventKind = "Adopted"
	// EventStoppedForShutdown is a VMI stopped with the controller.
	EventStoppedForShutdown EventKind = "StoppedForShutdown"
	// EventError is a failure of the controller itself (saving state).
	EventError EventKind = "Error"
)

// Launcher events the controller passes on, under the contract's names.
const (
	EventScheduled  EventKind = launcherapi.EventScheduled
	EventRunning    EventKind = launcherapi.EventRunning
	EventGuestReady EventKind = launcherapi.EventGuestReady
	EventFaultFired EventKind = launcherapi.EventFaultFired
	EventSucceeded  EventKind = launcherapi.EventSucceeded
	EventFailed     EventKind = launcherapi.EventFailed
)

// ManualOperation reports whether k is one of the manual operations, after
// which the next start is not a retry.
func (k EventKind) ManualOperation() bool {
	return k == EventStopRequested || k == EventStartRequested || k == EventRestartRequested
}
