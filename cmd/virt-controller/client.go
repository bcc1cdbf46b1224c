package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// runOperation is "virt-controller stop|start|restart NAME".
func runOperation(op string, args []string) error {
	fs := pflag.NewFlagSet(op, pflag.ContinueOnError)
	stateDir := fs.String("state-dir", defaultStateDir(), "state folder of the running controller")
	output := fs.StringP("output", "o", "", "also print the VM afterwards: table, json or yaml")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the controller's answer")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: virt-controller %s NAME [flags]\n%s", op, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fail(exitBadInput, "%v", err)
	}
	if fs.NArg() != 1 {
		return fail(exitBadInput, "want exactly one VM NAME (or NAMESPACE/NAME), got %d arguments", fs.NArg())
	}
	if _, err := controller.ParseKey(fs.Arg(0)); err != nil {
		return fail(exitBadInput, "%v", err)
	}
	if err := checkOutput(*output, true); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := controller.Call(ctx, *stateDir, controller.Request{Op: op, VM: fs.Arg(0)})
	if err != nil {
		if errors.Is(err, controller.ErrNoController) {
			return fail(exitNoRunning, "%v; start one with: virt-controller run --state-dir %s VM.yaml...", err, *stateDir)
		}
		return fail(exitFailed, "%v", err)
	}
	if !resp.OK {
		if resp.NotFound {
			return fail(exitNotFound, "%s", resp.Error)
		}
		return fail(exitFailed, "%s", resp.Error)
	}
	fmt.Fprintln(os.Stderr, resp.Message)
	if *output != "" {
		return printSnapshots(os.Stdout, resp.VMs, *output, true)
	}
	return nil
}

// runStatus is "virt-controller status [NAME] [-o table|json|yaml]".
func runStatus(args []string) error {
	fs := pflag.NewFlagSet("status", pflag.ContinueOnError)
	stateDir := fs.String("state-dir", defaultStateDir(), "state folder")
	output := fs.StringP("output", "o", "table", "table, json or yaml")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: virt-controller status [NAME] [flags]\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fail(exitBadInput, "%v", err)
	}
	if fs.NArg() > 1 {
		return fail(exitBadInput, "want at most one VM NAME, got %d arguments", fs.NArg())
	}
	if err := checkOutput(*output, false); err != nil {
		return err
	}
	req := controller.Request{Op: "list"}
	var keys []controller.Key
	if fs.NArg() == 1 {
		k, err := controller.ParseKey(fs.Arg(0))
		if err != nil {
			return fail(exitBadInput, "%v", err)
		}
		req, keys = controller.Request{Op: "status", VM: fs.Arg(0)}, []controller.Key{k}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var snaps []*controller.Snapshot
	resp, err := controller.Call(ctx, *stateDir, req)
	switch {
	case err == nil && resp.OK:
		snaps = resp.VMs
	case err == nil && resp.NotFound:
		return fail(exitNotFound, "%s", resp.Error)
	case err == nil:
		return fail(exitFailed, "%s", resp.Error)
	case errors.Is(err, controller.ErrNoController):
		snaps, err = controller.ReadSnapshots(*stateDir, keys...)
		if controller.IsNotFound(err) {
			return fail(exitNotFound, "%v", err)
		}
		if err != nil {
			return fail(exitBadInput, "%v", err)
		}
		fmt.Fprintf(os.Stderr, "(no controller running on %s: showing the state as last saved)\n", *stateDir)
	default:
		return fail(exitFailed, "%v", err)
	}
	return printSnapshots(os.Stdout, snaps, *output, len(keys) == 1)
}

func checkOutput(o string, allowEmpty bool) error {
	switch o {
	case "table", "json", "yaml":
		return nil
	case "":
		if allowEmpty {
			return nil
		}
	}
	return fail(exitBadInput, "--output %q: allowed values are table, json, yaml", o)
}
