package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/deviceplugin"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
	"github.com/crashloop-harness/crashloop/pkg/podmanrm"
)

// --node-side values.
const (
	nodeSideAgent   = "agent"
	nodeSideHandler = "virt-handler"
	// handlerIP is virt-handler's pod IP, on the stack's namespace's lo
	// beside virt-api's Service address; handlerPort its metrics port.
	handlerIP   = "10.254.0.11"
	handlerPort = "8444"
)

// handlerRestart paces virt-handler's restarts, as its DaemonSet's pod
// would be restarted.
var handlerRestart = clusterlite.Backoff{Initial: time.Second, Max: 30 * time.Second}

// checkNodeSide checks --node-side and what it needs.
func (o upOptions) checkNodeSide() error {
	switch o.nodeSide {
	case nodeSideAgent:
		if len(o.handlerFlags) > 0 {
			return fmt.Errorf("--virt-handler-flag %q: only with --node-side virt-handler", o.handlerFlags)
		}
		return nil
	case nodeSideHandler:
	default:
		return fmt.Errorf("--node-side %q: want agent or virt-handler", o.nodeSide)
	}
	if o.mode != "direct" || o.runtime == "process" {
		return fmt.Errorf("--node-side virt-handler: the launcher pods run their own command line as pods; give neither --launcher-mode nor --launcher-runtime process")
	}
	for _, b := range []string{"virt-handler", "virt-chroot"} {
		if _, err := os.Stat(filepath.Join(o.binDir, b)); err != nil {
			return fmt.Errorf("--node-side virt-handler: %w (build with `make clusterlite VIRT_HANDLER=1`)", err)
		}
	}
	return nil
}

// nodeSide is KubeVirt's virt-handler and the node namespace it runs in.
type nodeSide struct {
	node    *clusterlite.Node
	devices *deviceplugin.Server
	handler *clusterlite.Process
	label   string
	mode    *nodeagent.KubeletMode
	log     *slog.Logger
}

// startNodeSide starts, for --node-side virt-handler, the node namespace
// (after removing what a killed stack left), kubelet's device-plugin
// Registration server, virt-handler's certificates, node-labeller files
// and Pod object, and virt-handler itself, restarted when it exits.
func (s *stack) startNodeSide(ctx context.Context, o upOptions) error {
	if o.nodeSide != nodeSideHandler {
		return nil
	}
	n := &nodeSide{label: nodeagent.LabelNode + "=" + o.nodeName, log: s.log}
	if err := clusterlite.RemoveNodeLeftovers(ctx, n.label, s.log); err != nil {
		return err
	}
	ip := net.ParseIP(handlerIP)
	if err := s.cp.AddAddress(ctx, ip); err != nil {
		return err
	}
	certs, err := s.cp.WriteVirtHandlerPKI(filepath.Join(s.stateDir, "virt-handler-pki"), ip)
	if err != nil {
		return err
	}
	labeller := filepath.Join(s.stateDir, "node-labeller")
	if err := clusterlite.WriteNodeLabellerFiles(ctx, labeller, filepath.Join(s.stateDir, "node-labeller-libvirt"), s.log); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("node namespace: %w", err)
	}
	s.node = n
	if n.node, err = clusterlite.StartNode(ctx, self, filepath.Join(s.stateDir, "nodens"), s.cp.NetNSPath(), s.log); err != nil {
		return err
	}
	if err := n.node.WritePID1(s.stateDir); err != nil {
		return err
	}
	if n.devices, err = deviceplugin.Start(filepath.Join(n.node.KubeletDir(), "device-plugins"), nil, s.log.With("component", "device-plugins")); err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(s.cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if err := clusterlite.RegisterHandlerPod(ctx, admin, o.nodeName, o.image, ip); err != nil {
		return err
	}
	h := clusterlite.HandlerPod{Node: n.node, NodeName: o.nodeName, BinDir: o.binDir, Image: o.image, PodIP: ip,
		Kubeconfig: s.cp.KubeconfigFor(handlerUser), Certs: certs, LabellerDir: labeller, Port: handlerPort, ExtraFlags: o.handlerFlags}
	argv := h.Argv(n.label)
	if n.handler, err = s.cp.StartProcess("virt-handler", argv[0], argv[1:], clusterlite.Restart(handlerRestart)); err != nil {
		return err
	}
	n.mode = &nodeagent.KubeletMode{Command: n.node.Command, PodsDir: n.node.PodsDir(), Devices: n.devices,
		ImageDir: o.imageDir, CacheDir: filepath.Join(s.stateDir, "qemu-capabilities"),
		Network: &nodeagent.PodNetwork{NetNS: n.node.NetNS()}}
	if err := os.MkdirAll(n.mode.CacheDir, 0o755); err != nil {
		return fmt.Errorf("capability cache: %w", err)
	}
	// The pods' bridge, in the stack's network namespace (never the host's).
	if err := n.mode.SetupNetwork(ctx); err != nil {
		return err
	}
	s.log.Info("virt-handler started in the node namespace", "container", clusterlite.HandlerContainer(o.nodeName), "podIP", handlerIP)
	return nil
}

// kubelet is the agent's kubelet-only mode, nil without virt-handler.
func (n *nodeSide) kubelet() *nodeagent.KubeletMode {
	if n == nil {
		return nil
	}
	return n.mode
}

// stop stops virt-handler (its restarts first, then its container, from
// inside), removes every container of the node from inside while the
// node's PID 1 lives, and ends the node namespace and the Registration
// server.
func (n *nodeSide) stop() error {
	if n == nil {
		return nil
	}
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if n.handler != nil {
		// nsenter does not pass signals on: this ends the restarts and
		// the client; the container is stopped from inside.
		errs = append(errs, n.handler.Stop(ctx))
	}
	if n.node != nil {
		podman := func(ctx context.Context, args ...string) (string, error) {
			return n.node.Run(ctx, append([]string{"podman"}, args...)...)
		}
		// The graceful stop gives virt-handler and the launchers their
		// SIGTERM; a container that ends meanwhile can make it fail, and
		// the forced removal below is what must succeed.
		if _, err := podman(ctx, "stop", "--ignore", "--time", "20", "--filter", "label="+n.label); err != nil {
			n.log.Warn("stopping the node's containers", "err", err)
		}
		out, err := podman(ctx, "ps", "--all", "--filter", "label="+n.label, "--format", "{{.Names}}")
		if err == nil {
			err = podmanrm.Remove(ctx, podman, strings.Fields(out)...)
		}
		if err != nil {
			err = fmt.Errorf("removing the node's containers: %w", err)
		}
		errs = append(errs, err, n.mode.RemoveNetwork(ctx), n.mode.RemoveImported(ctx), n.node.Stop())
	}
	if n.devices != nil {
		n.devices.Stop()
	}
	return errors.Join(errs...)
}

// writePIDs records every process the stack started, for whoever checks
// that tear-down leaves none.
func (s *stack) writePIDs(path string) error {
	var b strings.Builder
	pids := s.cp.PIDs()
	for _, p := range []*clusterlite.Process{s.api, s.ctl} {
		pids = append(pids, p.PIDs()...)
	}
	if s.node != nil {
		pids = append(pids, s.node.node.PID1())
		pids = append(pids, s.node.handler.PIDs()...)
	}
	for _, pid := range pids {
		fmt.Fprintln(&b, pid)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
