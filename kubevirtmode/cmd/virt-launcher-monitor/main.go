// Command virt-launcher-monitor is the compute container's entry point of
// the launcher image in KubeVirt mode: it takes the command line KubeVirt's
// virt-controller renders (v1.6.0 through v1.9.0 and main), serves
// virt-handler's command socket and runs the VMI through our launcher (see
// package monitor).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/crashloop-harness/crashloop/kubevirtmode/monitor"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func main() {
	os.Exit(run())
}

func run() int {
	f, err := monitor.ParseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher-monitor: %v\n", err)
		return int(launcherapi.ExitUsage)
	}
	level, err := launcherapi.ParseLogLevel(f.LogLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-launcher-monitor: --crashloop-log-level: %v\n", err)
		return int(launcherapi.ExitUsage)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("vmi", f.Namespace+"/"+f.Name)
	code, err := monitor.Run(context.Background(), f, log, os.Stderr)
	if err != nil {
		log.Error("monitoring virt-launcher failed", "err", err)
		code = 1
	}
	if f.KeepAfterFailure && code != 0 {
		log.Info("keeping the container alive since --keep-after-failure is set")
		select {}
	}
	return code
}
