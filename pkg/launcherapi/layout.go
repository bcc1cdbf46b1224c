package launcherapi

import "path/filepath"

// Dir is a launch folder: what a runner (the controller, the node agent)
// gives one launcher, and where it finds the launcher's output afterwards.
type Dir string

// File names inside a launch folder.
const (
	ManifestFile = "vmi.json"     // the VMI the launcher runs
	EventsFile   = "events.jsonl" // the launcher's stdout: one Event per line
	LogFile      = "launcher.log" // the launcher's stderr
	ConsoleFile  = "console.log"  // the guest's serial console (--console-log)
)

// Manifest is the VMI file handed to the launcher.
func (d Dir) Manifest() string { return filepath.Join(string(d), ManifestFile) }

// Events is the launcher's stdout, one Event per line.
func (d Dir) Events() string { return filepath.Join(string(d), EventsFile) }

// Log is the launcher's stderr.
func (d Dir) Log() string { return filepath.Join(string(d), LogFile) }

// Console is the guest's serial console log.
func (d Dir) Console() string { return filepath.Join(string(d), ConsoleFile) }
