// Command virt-handler-driver plays KubeVirt v1.6.0's virt-handler for
// one launcher pod, with virt-handler's own cmd client and notify server
// (package handlerside): it serves the pod's notify pipe, waits for the
// launcher socket, syncs the VMI read from --vmi, and writes what the
// domain events mean for the VMI as launcherapi event lines on stdout
// (Scheduled, Running, Succeeded or Failed). SIGTERM or SIGINT is a stop
// request: ShutdownVirtualMachine, KillVirtualMachine after the grace
// period, DeleteVirtualMachine. Cluster-lite's node agent runs it beside
// each launcher pod in KubeVirt mode (clusterlite up --launcher-mode
// kubevirt). It is not virt-handler: no API server, no node, one pod.
//
// Usage:
//
//	virt-handler-driver --vmi FILE --pod-volumes DIR --handler-dir DIR [--grace-period D]
//
// Exit codes: 0 the domain ended and was deleted (or the stop finished),
// 1 the drive failed (the log says why), 3 bad flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/kubevirtmode/handlerside"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	d, err := parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "virt-handler-driver: %v\n", err)
		return 3
	}
	d.Out = os.Stdout
	d.Log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("vmi", d.VMI.Namespace+"/"+d.VMI.Name)
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		close(stop)
	}()
	if err := d.Run(context.Background(), stop); err != nil {
		d.Log.Error("driving the launcher pod failed", "err", err)
		return 1
	}
	return 0
}

func parse(args []string) (*handlerside.Driver, error) {
	fs := pflag.NewFlagSet("virt-handler-driver", pflag.ContinueOnError)
	vmiFile := fs.String("vmi", "", "the VMI (JSON) that SyncVirtualMachine sends")
	d := &handlerside.Driver{}
	fs.StringVar(&d.Volumes, "pod-volumes", "", "host folder of the pod's emptyDir volumes, one sub-folder per volume (public, sockets)")
	fs.StringVar(&d.HandlerDir, "handler-dir", "", "folder for the notify server's own socket")
	fs.DurationVar(&d.Grace, "grace-period", 0, "how long a graceful stop waits before KillVirtualMachine (0: the VMI's terminationGracePeriodSeconds)")
	fs.DurationVar(&d.SocketTimeout, "socket-timeout", 3*time.Minute, "how long to wait for the launcher socket (virt-handler waits 3 minutes)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: flags only", fs.Args())
	}
	for name, v := range map[string]string{"--vmi": *vmiFile, "--pod-volumes": d.Volumes, "--handler-dir": d.HandlerDir} {
		if v == "" {
			return nil, fmt.Errorf("%s is required", name)
		}
	}
	if d.Grace < 0 {
		return nil, fmt.Errorf("--grace-period %v: want 0 or more", d.Grace)
	}
	data, err := os.ReadFile(*vmiFile)
	if err != nil {
		return nil, fmt.Errorf("--vmi: %w", err)
	}
	d.VMI = &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(data, d.VMI); err != nil {
		return nil, fmt.Errorf("--vmi %s: not a VirtualMachineInstance in JSON: %w", *vmiFile, err)
	}
	if d.VMI.Name == "" || d.VMI.UID == "" {
		return nil, fmt.Errorf("--vmi %s: metadata.name and metadata.uid are required", *vmiFile)
	}
	return d, nil
}
