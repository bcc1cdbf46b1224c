package launcher

import (
	"os/signal"
	"syscall"
)

func ignoreStopSignals() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
}
