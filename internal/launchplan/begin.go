package launchplan

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"

	"github.com/spf13/pflag"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Begin is the light front's first step: it parses argv over base
// (launcherapi.ParseArgs), prints a usage error to stderr, and makes the
// logger at --log-level. ok is false when the program must exit now with
// code (after --help, or on bad flags).
func Begin(argv []string, base launcherapi.Args, stderr io.Writer) (args launcherapi.Args, log *slog.Logger, code launcherapi.ExitCode, ok bool) {
	args, err := launcherapi.ParseArgs(argv, base, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return args, nil, launcherapi.ExitSucceeded, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return args, nil, launcherapi.ExitUsage, false
	}
	return args, Logger(args, stderr), 0, true
}

// Logger is the stages' logger on stderr at the parsed --log-level.
func Logger(args launcherapi.Args, stderr io.Writer) *slog.Logger {
	level, _ := launcherapi.ParseLogLevel(args.LogLevel)
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// crashMessage is KubeVirt's panic value for a simulated crash
// (cmd/virt-launcher/virt-launcher.go: panic(fmt.Errorf(...))).
const crashMessage = "Simulated virt-launcher crash"

// SimulatedCrash is the launcher's deliberate crash (--simulate-crash, the
// fail-fast annotation): it logs why, prints what the Go runtime prints for
// KubeVirt's panic (the message, then this goroutine's stack) and exits
// with the runtime's status for a fatal panic, 2, before libvirt or QEMU
// exist. It does not call panic: a fatal panic first freezes the world
// (runtime.freezetheworld sleeps at least 2 ms, three times a Go program's
// whole exec to exit), which is not KubeVirt's behaviour but the Go
// runtime's, and most of what the crash path would cost. As with a fatal
// panic in a stage that has nothing to clean up yet, no deferred function
// runs: callers crash before they make anything.
func SimulatedCrash(log *slog.Logger, why string) {
	ReportSimulatedCrash(log, why)
	os.Exit(int(launcherapi.ExitPanic))
}

// ReportSimulatedCrash logs and prints what SimulatedCrash does, without
// the exit: for a process that outlives its simulated launcher.
func ReportSimulatedCrash(log *slog.Logger, why string) {
	log.Info(why + ": crashing before libvirt or QEMU")
	_, _ = os.Stderr.Write(panicText())
}

// panicText is a fatal panic's report of crashMessage from the calling
// goroutine, as the runtime prints it with the default GOTRACEBACK.
func panicText() []byte {
	head := "panic: " + crashMessage + "\n\n"
	buf := make([]byte, len(head)+8192)
	n := copy(buf, head)
	n += runtime.Stack(buf[n:], false)
	return buf[:n]
}
