package spawn

import (
	"fmt"
	"os"
	"syscall"
)

// Exit is how a child ended.
type Exit struct {
	// Code is the exit status; a child killed by signal n has 128+n, as a
	// shell reports it; -1 when unknown (Wait failed).
	Code int
	// Signal is the signal that killed the child, or zero.
	Signal syscall.Signal
	// Err is set when the child could not be waited for.
	Err error
}

// decodeExit reads a reaped child's state. The error from Wait is used
// only when there is no state: with Cmd.Cancel, Wait reports the context's
// error even for a child that exited 0 after SIGTERM.
func decodeExit(ps *os.ProcessState, waitErr error) Exit {
	if ps == nil {
		return Exit{Code: -1, Err: waitErr}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return Exit{Code: ps.ExitCode()}
}

// Success reports a zero exit status.
func (e Exit) Success() bool { return e.Code == 0 && e.Signal == 0 && e.Err == nil }

// String describes the end for messages: "exit code 3", "killed by signal
// killed", "wait failed: ...".
func (e Exit) String() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("wait failed: %v", e.Err)
	case e.Signal != 0:
		return "killed by signal " + e.Signal.String()
	default:
		return fmt.Sprintf("exit code %d", e.Code)
	}
}
