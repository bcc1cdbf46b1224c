// Command clusterlite brings up a one-node KubeVirt on this machine, in a
// network namespace of its own, and tears it down cleanly: a real etcd and kube-apiserver,
// KubeVirt's CRDs, KubeVirt object, webhooks and APIService generated from
// KubeVirt's own operator code, KubeVirt's real virt-controller and
// virt-api (linked from kubevirt.io/kubevirt v1.6.0, built by
// tools/clusterlite/build.sh), and our node agent, which plays kubelet and
// virt-handler and runs our virt-launcher for every VMI. With
// --node-side virt-handler, KubeVirt's own virt-handler runs in a node
// PID and mount namespace of the stack's ("clusterlite node-init" is its
// PID 1) and the agent keeps kubelet's role.
//
// Usage:
//
//	clusterlite up [flags]
//
// etcd, the API server, virt-api and virt-controller run in that
// namespace (virt-api's Service address on its lo); the host's network is
// left alone, and the host reaches the API server through a forward on its
// own 127.0.0.1. The node agent runs in this process and its launchers need
// no network.
//
// "up" runs in the foreground. When the stack is ready it prints
// "NETNS=<path>" (nsenter --net=<path> enters the namespace) and
// "KUBECONFIG=<path>" on stdout (point kubectl-like clients and the cluster
// lane at it); SIGINT or SIGTERM tears everything down: the VMs' launchers,
// KubeVirt's components, the API server, etcd, the namespace and, unless
// --keep-state, the state folder. After a SIGKILL the kernel ends the
// children and frees the namespace; the next "up" removes the podman
// containers a killed stack left. With --node-side virt-handler the state
// folder's node-pid1 holds the host's PID of the node namespace's PID 1:
// nsenter -t it -p -m -n enters the node, where podman lists virt-handler's
// and the launcher pods' containers (clusterlite.ContainerPID maps their
// PIDs to the host's, so that a test can signal one by PID). Exit codes: 0 clean, 1 the
// stack failed or did not stop cleanly, 3 bad flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: clusterlite up [flags]   (clusterlite up --help lists the flags)")
		if len(args) == 0 {
			return 3
		}
		return 0
	}
	if args[0] == clusterlite.NodeInitCommand {
		// The node namespace's PID 1 (--node-side virt-handler), started
		// by "up" itself.
		if err := clusterlite.NodeInit(args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "clusterlite %s: %v\n", clusterlite.NodeInitCommand, err)
			return 1
		}
		return 0
	}
	if args[0] != "up" {
		fmt.Fprintf(os.Stderr, "clusterlite: unknown command %q (the only command is \"up\")\n", args[0])
		return 3
	}
	opts, err := parseUp(args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterlite up: %v\n", err)
		return 3
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "clusterlite up: --log-level %q: want debug, info, warn or error\n", opts.logLevel)
		return 3
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := up(ctx, opts, logger); err != nil {
		logger.Error("clusterlite failed", "err", err)
		return 1
	}
	return 0
}

// upOptions are the flags of "clusterlite up".
type upOptions struct {
	stateDir    string
	keepState   bool
	binDir      string
	launcher    string
	image       string // the launcher image virt-controller names in every pod
	imageDir    string
	nodeName    string
	virtAPIIP   string
	logLevel    string
	launcherLog string
	runtime     string
	mode        string
	driver      string
	nodeSide    string
	// handlerFlags are appended to virt-handler's command line.
	handlerFlags []string
}

func parseUp(args []string) (upOptions, error) {
	exe, _ := os.Executable()
	binDir := filepath.Dir(exe)
	o := upOptions{}
	fs := pflag.NewFlagSet("clusterlite up", pflag.ContinueOnError)
	fs.StringVar(&o.stateDir, "state-dir", "", "folder for etcd data, certificates, logs, kubeconfigs and the launchers' work (default: a new temporary folder)")
	fs.BoolVar(&o.keepState, "keep-state", false, "keep the state folder (logs, kubeconfig) after tear-down")
	fs.StringVar(&o.binDir, "bin-dir", filepath.Join(binDir, "..", "clusterlite", "bin"), "folder with etcd, kube-apiserver, virt-controller, virt-api and kubevirt-manifests (tools/clusterlite/build.sh)")
	fs.StringVar(&o.launcher, "launcher", filepath.Join(binDir, "virt-launcher"), "our virt-launcher binary, run by the node agent for every VMI")
	fs.StringVar(&o.image, "launcher-image", defaultLauncherImage, "the launcher image virt-controller writes into every launcher pod (its --launcher-image) and podman runs; with --node-side virt-handler also virt-handler's image")
	fs.StringVar(&o.imageDir, "image-dir", filepath.Join(binDir, "..", "images"), "the launcher's image folder (make images)")
	fs.StringVar(&o.nodeName, "node-name", "clusterlite-node", "name of the one node")
	fs.StringVar(&o.virtAPIIP, "virt-api-ip", "10.254.0.10", "virt-api's Service address, on the lo of the stack's own network namespace (inside 10.254.0.0/24; not loopback, which Endpoints refuse)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.launcherLog, "launcher-log-level", "info", "--log-level passed to every virt-launcher")
	fs.StringVar(&o.runtime, "launcher-runtime", "auto", "how the node agent runs launcher pods: podman (a container of the pod's image, with its resources as cgroup limits), process (bare processes of --launcher), or auto (podman when it works and has the image, else process, said once at warn level)")
	fs.StringVar(&o.mode, "launcher-mode", "direct", "what runs in a launcher pod: direct (our virt-launcher for the pod's VMI, the node agent following its events) or kubevirt (the pod's own command line, virt-launcher-monitor, in a podman container with the pod's volumes, driven over KubeVirt's gRPC protocol by --driver beside it; needs podman and the image)")
	fs.StringVar(&o.driver, "driver", filepath.Join(binDir, "virt-handler-driver"), "kubevirtmode's virt-handler-driver, for --launcher-mode kubevirt (make kubevirtmode)")
	fs.StringVar(&o.nodeSide, "node-side", "agent", "who plays the node: agent (our node agent plays kubelet and virt-handler) or virt-handler (KubeVirt's own virt-handler from --bin-dir runs in a node namespace, the agent keeps kubelet's role; needs podman, the launcher image and `make clusterlite VIRT_HANDLER=1`)")
	fs.StringArrayVar(&o.handlerFlags, "virt-handler-flag", nil, "with --node-side virt-handler: a flag appended to virt-handler's command line as the DaemonSet gives it (repeatable), e.g. --virt-handler-flag=--domain-resync-period-seconds=30")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := o.checkNodeSide(); err != nil {
		return o, err
	}
	switch o.runtime {
	case "auto", "podman", "process":
	default:
		return o, fmt.Errorf("--launcher-runtime %q: want auto, podman or process", o.runtime)
	}
	switch {
	case o.mode == "direct":
	case o.mode != "kubevirt":
		return o, fmt.Errorf("--launcher-mode %q: want direct or kubevirt", o.mode)
	case o.runtime == "process":
		return o, errors.New("--launcher-mode kubevirt with --launcher-runtime process: KubeVirt mode runs launcher pods as podman containers (give podman or auto)")
	default:
		if _, err := os.Stat(o.driver); err != nil {
			return o, fmt.Errorf("--driver %s: %w (build with `make kubevirtmode`)", o.driver, err)
		}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: \"up\" takes flags only", fs.Args())
	}
	// Tear-down removes the state folder, so it must hold nothing of
	// anyone else's (nor of another running clusterlite).
	if entries, err := os.ReadDir(o.stateDir); o.stateDir != "" && err == nil && len(entries) > 0 {
		return o, fmt.Errorf("--state-dir %s: not empty (%d entries); give a new or empty folder", o.stateDir, len(entries))
	}
	for name, p := range map[string]string{"--launcher": o.launcher, "--image-dir": o.imageDir, "--bin-dir": o.binDir} {
		if _, err := os.Stat(p); err != nil {
			return o, fmt.Errorf("%s %s: %w (build with `make build images clusterlite`)", name, p, err)
		}
	}
	return o, nil
}

// agentMode is the node agent's launcher runtime and KubeVirt mode (nil:
// direct). KubeVirt mode has no fallback to bare processes.
func (o upOptions) agentMode() (string, *nodeagent.KubeVirtMode) {
	if o.mode != "kubevirt" {
		return o.runtime, nil
	}
	return "podman", &nodeagent.KubeVirtMode{Driver: o.driver, ImageDir: o.imageDir}
}

// runLogged runs a command to completion with its output in logPath; it
// is stopped (SIGTERM, then SIGKILL after 10 s) when ctx ends first.
func runLogged(ctx context.Context, logPath, bin string, args ...string) error {
	p, err := spawn.Start(spawn.Spec{Path: bin, Args: args, StdoutFile: logPath, StderrFile: logPath, Truncate: true})
	if err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		if _, err := p.Stop(context.Background(), 10*time.Second); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(bin), err)
		}
		return fmt.Errorf("%s: %w", filepath.Base(bin), ctx.Err())
	}
	if e := p.Exit(); !e.Success() {
		lines, _ := spawn.Tail(logPath, 30)
		return fmt.Errorf("%s: %v\n%s", filepath.Base(bin), e, strings.Join(lines, "\n"))
	}
	return nil
}
