package launcher

import (
	"os/signal"
	"syscall"
)

// ignoreStopSignals keeps the reaper alive through the signals aimed at the
// launcher.
func ignoreStopSignals() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
}
