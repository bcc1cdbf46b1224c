package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

// KubeVirt's components are told apart by user name: the VMI mutating
// webhook puts the old status back on updates by anyone who is not one of
// KubeVirt's service accounts (pkg/virt-api/webhooks/serviceaccounts.go).
const (
	controllerUser = "system:serviceaccount:kubevirt:kubevirt-controller"
	apiUser        = "system:serviceaccount:kubevirt:kubevirt-apiserver"
	handlerUser    = "system:serviceaccount:kubevirt:kubevirt-handler"
	// defaultLauncherImage is --launcher-image's default: what
	// virt-controller writes into pods; the node agent runs it with
	// podman, or runs --launcher as a bare process whatever the image
	// says (--launcher-runtime).
	defaultLauncherImage = "localhost/crashloop/virt-launcher:latest"
	// controllerPort is virt-controller's metrics port on the stack's
	// namespace's loopback, which nothing else shares.
	controllerPort = "8443"
)

// controllerRestart paces virt-controller's restarts: it exits when it
// loses its leader lease, and a Deployment would start it again.
var controllerRestart = clusterlite.Backoff{Initial: time.Second, Max: 30 * time.Second}

// stack is what "up" started, for tear-down.
type stack struct {
	log       *slog.Logger
	cp        *clusterlite.ControlPlane
	api, ctl  *clusterlite.Process
	agentStop context.CancelFunc
	agentDone chan error
	node      *nodeSide // --node-side virt-handler
	stateDir  string
	keepState bool
}

// up brings the stack up, serves until ctx ends, and tears it down.
func up(ctx context.Context, o upOptions, log *slog.Logger) (err error) {
	begin := time.Now()
	ip := net.ParseIP(o.virtAPIIP)
	if ip == nil || ip.To4() == nil || ip.IsLoopback() {
		return fmt.Errorf("--virt-api-ip %q: want an IPv4 address outside 127.0.0.0/8 inside the service range %s", o.virtAPIIP, clusterlite.ServiceClusterIPRange)
	}
	s := &stack{log: log, keepState: o.keepState}
	defer func() { err = errors.Join(err, s.teardown()) }()
	if err := s.makeState(o.stateDir); err != nil {
		return err
	}
	if s.cp, err = clusterlite.Start(ctx, clusterlite.Config{
		BinDir: o.binDir, StateDir: filepath.Join(s.stateDir, "control-plane"), Logger: log,
		Users: stackUsers(o),
	}); err != nil {
		return err
	}
	// virt-api's Service address, on the namespace's lo: the aggregation
	// layer and the webhooks dial it from the API server, inside.
	if err := s.cp.AddAddress(ctx, ip); err != nil {
		return err
	}
	files, err := s.cp.WriteKubeVirtPKI(filepath.Join(s.stateDir, "kubevirt-pki"), ip)
	if err != nil {
		return err
	}
	manifests := []string{"--apply", "--kubeconfig", s.cp.KubeconfigPath(), "--ca-bundle", files["ca.crt"],
		"--virt-api-service-ip", ip.String(), "--launcher-image", o.image, "-o", "yaml"}
	_, kv := o.agentMode()
	manifests = append(manifests, clusterlite.EmulationArgs(kv != nil || o.nodeSide == nodeSideHandler, log)...)
	if err := runLogged(ctx, filepath.Join(s.stateDir, "kubevirt-manifests.log"), filepath.Join(o.binDir, "kubevirt-manifests"), manifests...); err != nil {
		return fmt.Errorf("installing KubeVirt's CRDs and objects: %w", err)
	}
	if err := s.startKubeVirt(o.binDir, o.image, ip, files); err != nil {
		return err
	}
	if err := s.startNodeSide(ctx, o); err != nil {
		return err
	}
	if err := s.startAgent(ctx, o); err != nil {
		return err
	}
	if err := s.cp.WaitKubeVirtReady(ctx, o.nodeName); err != nil {
		return err
	}
	if err := s.writePIDs(filepath.Join(s.stateDir, "pids")); err != nil {
		return err
	}
	log.Info("cluster-lite ready", "after", time.Since(begin).Round(100*time.Millisecond), "kubeconfig", s.cp.KubeconfigPath())
	if s.node != nil {
		// The agent's kubelet identity, for whoever checks what the API
		// server lets it do.
		fmt.Printf("KUBELET_KUBECONFIG=%s\n", s.cp.KubeconfigFor(clusterlite.NodeUser(o.nodeName)))
	}
	fmt.Printf("NETNS=%s\n# enter the stack's network namespace with: nsenter --net=%s\n", s.cp.NetNSPath(), s.cp.NetNSPath())
	fmt.Printf("KUBECONFIG=%s\n", s.cp.KubeconfigPath())
	<-ctx.Done()
	log.Info("tearing down")
	return nil
}

// makeState creates the state folder (a new temporary one when dir is
// empty) and its pid file.
func (s *stack) makeState(dir string) error {
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "clusterlite-"); err != nil {
			return fmt.Errorf("creating the state folder: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating --state-dir %s: %w", dir, err)
	}
	if s.stateDir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.stateDir, "clusterlite.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing pid file: %w", err)
	}
	return nil
}

// startKubeVirt starts virt-api on the Service address and virt-controller
// (restarted with a backoff when it exits, naming image in every launcher
// pod), both in the namespace.
func (s *stack) startKubeVirt(binDir, image string, ip net.IP, files map[string]string) (err error) {
	if s.api, err = s.cp.StartProcess("virt-api", filepath.Join(binDir, "virt-api"), []string{
		"--kubeconfig", s.cp.KubeconfigFor(apiUser), "--listen", ip.String(), "--port", "443",
		"--tls-cert-file", files["virt-api.crt"], "--tls-key-file", files["virt-api.key"],
		"--handler-cert-file", files["virt-api-handler-client.crt"], "--handler-key-file", files["virt-api-handler-client.key"],
	}); err != nil {
		return err
	}
	s.ctl, err = s.cp.StartProcess("virt-controller", filepath.Join(binDir, "virt-controller"), []string{
		"--kubeconfig", s.cp.KubeconfigFor(controllerUser), "--launcher-image", image,
		"--listen", "127.0.0.1", "--port", controllerPort,
		"--prom-cert-file", files["virt-controller.crt"], "--prom-key-file", files["virt-controller.key"],
	}, clusterlite.Restart(controllerRestart))
	return err
}

// startAgent starts the node agent in this process. It reaches the API
// server through the forward on the host's loopback; its launchers need
// no network beyond their own loopback.
func (s *stack) startAgent(ctx context.Context, o upOptions) error {
	kubeletUser, schedulerUser := agentUsers(o)
	kv, err := kubecli.GetKubevirtClientFromRESTConfig(s.cp.RESTConfigFor(kubeletUser))
	if err != nil {
		return fmt.Errorf("node agent client as %s: %w", kubeletUser, err)
	}
	scheduler, err := kubernetes.NewForConfig(s.cp.RESTConfigFor(schedulerUser))
	if err != nil {
		return fmt.Errorf("node agent's scheduler client as %s: %w", schedulerUser, err)
	}
	runtime, kvMode := o.agentMode()
	var rt nodeagent.Runtime
	if s.node == nil { // with virt-handler, pods run inside the node namespace
		if rt, err = clusterlite.ChooseRuntime(ctx, clusterlite.RuntimeChoice{Mode: runtime, Launcher: o.launcher,
			Image: o.image, NodeName: o.nodeName, CacheDir: filepath.Join(s.stateDir, "qemu-capabilities")}, s.log); err != nil {
			return err
		}
	}
	agent, err := nodeagent.New(nodeagent.Config{
		Client: kv, Scheduler: scheduler, NodeName: o.nodeName, LauncherPath: o.launcher,
		LauncherArgs:   []string{"--image-dir", o.imageDir, "--log-level", o.launcherLog},
		ReadOnlyMounts: []string{o.imageDir}, Runtime: rt, KubeVirt: kvMode, Kubelet: s.node.kubelet(),
		WorkDir: filepath.Join(s.stateDir, "node"), Logger: s.log,
	})
	if err != nil {
		return err
	}
	s.log.Info("node agent identities", "kubelet", kubeletUser, "scheduler", schedulerUser)
	agentCtx, stop := context.WithCancel(context.Background())
	s.agentStop, s.agentDone = stop, make(chan error, 1)
	go func() { s.agentDone <- agent.Run(agentCtx) }()
	return nil
}

// teardown stops everything in the reverse order of start-up:
// virt-controller first (so it does not react to what follows), then the
// node agent (which stops every launcher and so every VM), virt-api, the
// API server and etcd (the namespace and its address go with them), and
// the state folder unless it is kept.
func (s *stack) teardown() error {
	begin := time.Now()
	var errs []error
	stop := func(p *clusterlite.Process) {
		if p == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs = append(errs, p.Stop(ctx))
	}
	stop(s.ctl)
	if s.agentStop != nil {
		s.agentStop()
		if err := <-s.agentDone; err != nil {
			errs = append(errs, fmt.Errorf("node agent: %w", err))
		}
	}
	errs = append(errs, s.node.stop())
	stop(s.api)
	if s.cp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs = append(errs, s.cp.Stop(ctx))
		cancel()
		s.log.Info("torn down", "after", time.Since(begin).Round(100*time.Millisecond), "clean", errors.Join(errs...) == nil)
	}
	switch {
	case s.stateDir == "":
	case s.keepState:
		s.log.Info("state kept", "dir", s.stateDir)
	default:
		if err := os.RemoveAll(s.stateDir); err != nil {
			errs = append(errs, fmt.Errorf("removing the state folder: %w", err))
		}
	}
	return errors.Join(errs...)
}
