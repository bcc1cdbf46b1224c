package launcherapi

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// Begin is the first step of both launcher binaries (the light front and
// the libvirt part): it parses argv over base (ParseArgs), prints a usage
// error to stderr, and makes the logger at --log-level. ok is false when
// the program must exit now with code (after --help, or on bad flags).
func Begin(argv []string, base Args, stderr io.Writer) (args Args, log *slog.Logger, code ExitCode, ok bool) {
	args, err := ParseArgs(argv, base, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return args, nil, ExitSucceeded, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-launcher: %v\n", err)
		return args, nil, ExitUsage, false
	}
	level, _ := ParseLogLevel(args.LogLevel)
	return args, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})), 0, true
}

// SimulatedCrash is the launcher's deliberate crash (--simulate-crash, the
// fail-fast annotation): it logs why and panics with KubeVirt's message,
// so that the process exits 2 before libvirt or QEMU exist.
func SimulatedCrash(log *slog.Logger, why string) {
	log.Info(why + ": crashing before libvirt or QEMU")
	panic("Simulated virt-launcher crash")
}
