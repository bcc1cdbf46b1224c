package launchplan

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

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

// SimulatedCrash is the launcher's deliberate crash (--simulate-crash, the
// fail-fast annotation): it logs why and panics with KubeVirt's message,
// so that the process exits 2 before libvirt or QEMU exist.
func SimulatedCrash(log *slog.Logger, why string) {
	log.Info(why + ": crashing before libvirt or QEMU")
	panic("Simulated virt-launcher crash")
}
