// Command virt-controller is a local KubeVirt VM controller: it runs
// VirtualMachine manifests by their runStrategy, one virt-launcher process
// per VMI, through KubeVirt's crash-loop backoff, and keeps each VM's
// status in a state folder that survives the controller being killed.
//
// Usage:
//
//	virt-controller run [flags] VM.yaml...     reconcile VMs in the foreground
//	virt-controller stop NAME                  stop a VM (ends a crash loop, clears startFailure)
//	virt-controller start NAME                 start a VM now (clears startFailure)
//	virt-controller restart NAME               stop the live VMI, if any, and start a new one now
//	virt-controller status [NAME] [-o table|json|yaml]
//
// NAME is "name" (namespace default) or "namespace/name". Every command
// takes --state-dir (default ./virt-controller-state, or
// $VIRT_CONTROLLER_STATE_DIR); stop, start and restart talk to the
// controller running on that folder through its control socket; status
// asks it too and falls back to the saved state when none runs.
//
// Exit codes:
//
//	0  success
//	1  the operation was refused or failed (e.g. start of a running VM)
//	2  bad input: flags, manifests, an unreadable or busy state folder
//	3  unknown VM
//	4  no controller is running on the state folder (stop, start, restart)
package main

import (
	"errors"
	"fmt"
	"os"
)

// Exit codes, documented in the package comment.
const (
	exitOK         = 0
	exitFailed     = 1
	exitBadInput   = 2
	exitNotFound   = 3
	exitNoRunning  = 4
	defaultState   = "virt-controller-state"
	stateDirEnvVar = "VIRT_CONTROLLER_STATE_DIR"
)

// exitError carries an exit code with an error message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage())
		return exitBadInput
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = runController(rest)
	case "stop", "start", "restart":
		err = runOperation(cmd, rest)
	case "status":
		err = runStatus(rest)
	case "-h", "--help", "help":
		fmt.Print(usage())
		return exitOK
	default:
		err = fail(exitBadInput, "unknown command %q: want run, stop, start, restart or status", cmd)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "virt-controller %s: %v\n", args[0], err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailed
}

func usage() string {
	return `usage:
  virt-controller run [flags] VM.yaml...
  virt-controller stop|start|restart NAME [--state-dir DIR]
  virt-controller status [NAME] [-o table|json|yaml] [--state-dir DIR]
run "virt-controller COMMAND --help" for a command's flags.
`
}

func defaultStateDir() string {
	if d := os.Getenv(stateDirEnvVar); d != "" {
		return d
	}
	return defaultState
}
