package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// KubeVirt's components are told apart by user name: the VMI mutating
// webhook puts the old status back on updates by anyone who is not one of
// KubeVirt's service accounts (pkg/virt-api/webhooks/serviceaccounts.go).
const (
	controllerUser = "system:serviceaccount:kubevirt:kubevirt-controller"
	apiUser        = "system:serviceaccount:kubevirt:kubevirt-apiserver"
	handlerUser    = "system:serviceaccount:kubevirt:kubevirt-handler"
	// launcherImage is what virt-controller writes into pods; the node
	// agent runs it with podman, or runs --launcher as a bare process
	// whatever the image says (--launcher-runtime).
	launcherImage = "localhost/crashloop/virt-launcher:latest"
)

// component is one supervised KubeVirt process.
type component struct {
	name string
	bin  string
	args []string
	// restart says the process is restarted when it exits on its own
	// (virt-controller exits when it loses its leader lease).
	restart bool

	mu      sync.Mutex
	proc    *clusterlite.Process
	stopped bool
	pids    []int
}

// up brings the stack up, serves until ctx ends, and tears it down.
func up(ctx context.Context, o upOptions, log *slog.Logger) (err error) {
	begin := time.Now()
	state := o.stateDir
	if state == "" {
		if state, err = os.MkdirTemp("", "clusterlite-"); err != nil {
			return fmt.Errorf("creating the state folder: %w", err)
		}
	} else if err := os.MkdirAll(state, 0o755); err != nil {
		return fmt.Errorf("creating --state-dir %s: %w", state, err)
	}
	if state, err = filepath.Abs(state); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	defer func() {
		if o.keepState {
			log.Info("state kept", "dir", state)
			return
		}
		if rmErr := os.RemoveAll(state); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing the state folder: %w", rmErr))
		}
	}()
	if err := os.WriteFile(filepath.Join(state, "clusterlite.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing pid file: %w", err)
	}

	ip := net.ParseIP(o.virtAPIIP)
	if ip == nil || ip.To4() == nil || ip.IsLoopback() {
		return fmt.Errorf("--virt-api-ip %q: want an IPv4 address outside 127.0.0.0/8 inside the service range %s", o.virtAPIIP, clusterlite.ServiceClusterIPRange)
	}

	cp, err := clusterlite.Start(ctx, clusterlite.Config{
		BinDir: o.binDir, StateDir: filepath.Join(state, "control-plane"), Logger: log,
		Users: []string{controllerUser, apiUser, handlerUser},
	})
	if err != nil {
		return err
	}
	var comps []*component
	var agentDone chan error
	agentCtx, agentCancel := context.WithCancel(context.Background())
	var removeAddr func() error
	defer func() {
		err = errors.Join(err, teardown(log, comps, agentCancel, agentDone, cp, removeAddr))
	}()

	pki := filepath.Join(state, "kubevirt-pki")
	files, err := writeKubeVirtPKI(cp, pki, ip)
	if err != nil {
		return err
	}
	if removeAddr, err = addLoopbackAddress(ip); err != nil {
		return err
	}
	manifestsLog := filepath.Join(state, "kubevirt-manifests.log")
	if err := runLogged(ctx, manifestsLog, filepath.Join(o.binDir, "kubevirt-manifests"),
		"--apply", "--kubeconfig", cp.KubeconfigPath(), "--ca-bundle", files["ca.crt"],
		"--virt-api-service-ip", ip.String(), "--launcher-image", launcherImage, "-o", "yaml"); err != nil {
		return fmt.Errorf("installing KubeVirt's CRDs and objects: %w", err)
	}

	ports, err := clusterlite.FreePorts(1)
	if err != nil {
		return err
	}
	comps = []*component{
		{name: "virt-api", bin: filepath.Join(o.binDir, "virt-api"), args: []string{
			"--kubeconfig", cp.KubeconfigFor(apiUser), "--listen", ip.String(), "--port", "443",
			"--tls-cert-file", files["virt-api.crt"], "--tls-key-file", files["virt-api.key"],
			"--handler-cert-file", files["virt-api-handler-client.crt"], "--handler-key-file", files["virt-api-handler-client.key"],
		}},
		{name: "virt-controller", restart: true, bin: filepath.Join(o.binDir, "virt-controller"), args: []string{
			"--kubeconfig", cp.KubeconfigFor(controllerUser), "--launcher-image", launcherImage,
			"--listen", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
			"--prom-cert-file", files["virt-controller.crt"], "--prom-key-file", files["virt-controller.key"],
		}},
	}
	for _, c := range comps {
		if err := c.start(cp, log); err != nil {
			return err
		}
		go c.supervise(ctx, cp, log)
	}

	kv, err := kubecli.GetKubevirtClientFromRESTConfig(cp.RESTConfigFor(handlerUser))
	if err != nil {
		return fmt.Errorf("node agent client: %w", err)
	}
	rt, err := chooseRuntime(ctx, o, filepath.Join(state, "qemu-capabilities"), log)
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(nodeagent.Config{
		Client: kv, NodeName: o.nodeName, LauncherPath: o.launcher,
		LauncherArgs:   []string{"--image-dir", o.imageDir, "--log-level", o.launcherLog},
		ReadOnlyMounts: []string{o.imageDir}, Runtime: rt,
		WorkDir: filepath.Join(state, "node"), Logger: log,
	})
	if err != nil {
		return err
	}
	agentDone = make(chan error, 1)
	go func() { agentDone <- agent.Run(agentCtx) }()

	if err := waitKubeVirtReady(ctx, cp, o.nodeName, log); err != nil {
		return err
	}
	if err := writePIDs(filepath.Join(state, "pids"), cp, comps); err != nil {
		return err
	}
	log.Info("cluster-lite ready", "after", time.Since(begin).Round(100*time.Millisecond), "kubeconfig", cp.KubeconfigPath())
	fmt.Printf("KUBECONFIG=%s\n", cp.KubeconfigPath())
	<-ctx.Done()
	log.Info("tearing down")
	return nil
}

// teardown stops everything in the reverse order of start-up:
// virt-controller first (so it does not react to what follows), then the
// node agent (which stops every launcher and so every VM), virt-api, the
// API server and etcd, and the address on lo.
func teardown(log *slog.Logger, comps []*component, agentCancel context.CancelFunc, agentDone chan error,
	cp *clusterlite.ControlPlane, removeAddr func() error) error {
	begin := time.Now()
	var errs []error
	stopComp := func(name string) {
		for _, c := range comps {
			if c.name == name {
				if err := c.stop(); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	stopComp("virt-controller")
	agentCancel()
	if agentDone != nil {
		if err := <-agentDone; err != nil {
			errs = append(errs, fmt.Errorf("node agent: %w", err))
		}
	}
	stopComp("virt-api")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cp.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	if removeAddr != nil {
		if err := removeAddr(); err != nil {
			errs = append(errs, err)
		}
	}
	log.Info("torn down", "after", time.Since(begin).Round(100*time.Millisecond), "clean", len(errs) == 0)
	return errors.Join(errs...)
}

func (c *component) start(cp *clusterlite.ControlPlane, log *slog.Logger) error {
	p, err := cp.StartProcess(c.name, c.bin, c.args)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.proc = p
	c.pids = append(c.pids, p.PID())
	c.mu.Unlock()
	return nil
}

// supervise restarts a component that exits by itself, if it should be.
func (c *component) supervise(ctx context.Context, cp *clusterlite.ControlPlane, log *slog.Logger) {
	for {
		c.mu.Lock()
		p := c.proc
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
		}
		c.mu.Lock()
		stopped := c.stopped
		c.mu.Unlock()
		if stopped || ctx.Err() != nil {
			return
		}
		log.Warn("component exited", "component", c.name, "err", p.Err(), "log", p.LogPath())
		if !c.restart {
			return
		}
		time.Sleep(time.Second)
		if err := c.start(cp, log); err != nil {
			log.Error("restarting component failed", "component", c.name, "err", err)
			return
		}
		log.Info("component restarted", "component", c.name)
	}
}

func (c *component) stop() error {
	c.mu.Lock()
	c.stopped = true
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.Stop(ctx)
}

// writeKubeVirtPKI issues virt-api's serving certificate (valid for the
// name the aggregator and the webhooks verify), its client certificate
// towards virt-handler, and virt-controller's metrics certificate.
func writeKubeVirtPKI(cp *clusterlite.ControlPlane, dir string, ip net.IP) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	files := map[string][]byte{"ca.crt": cp.CAPEM()}
	var err error
	apiNames := []string{"virt-api", "virt-api.kubevirt", "virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local"}
	if files["virt-api.crt"], files["virt-api.key"], err = cp.IssueServingCert(apiNames, []net.IP{ip}); err != nil {
		return nil, fmt.Errorf("issuing virt-api's certificate: %w", err)
	}
	if files["virt-api-handler-client.crt"], files["virt-api-handler-client.key"], err = cp.IssueClientCert("kubevirt.io:system:client:virt-handler", nil); err != nil {
		return nil, fmt.Errorf("issuing virt-api's client certificate: %w", err)
	}
	if files["virt-controller.crt"], files["virt-controller.key"], err = cp.IssueServingCert([]string{"localhost", "virt-controller.kubevirt.svc"}, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return nil, fmt.Errorf("issuing virt-controller's certificate: %w", err)
	}
	paths := map[string]string{}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		paths[name] = p
	}
	return paths, nil
}

// addLoopbackAddress puts ip on lo, where virt-api listens for the
// aggregation layer and the webhooks, and returns how to take it away.
func addLoopbackAddress(ip net.IP) (func() error, error) {
	cidr := ip.String() + "/32"
	if out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", "lo").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("listing the addresses of lo: %v: %s", err, out)
	} else if strings.Contains(string(out), " "+cidr+" ") {
		return nil, fmt.Errorf("%s is already on lo: is another clusterlite running? (remove it with `ip addr del %s dev lo`)", cidr, cidr)
	}
	if out, err := exec.Command("ip", "addr", "add", cidr, "dev", "lo").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("adding %s to lo (root needed): %v: %s", cidr, err, out)
	}
	return func() error {
		if out, err := exec.Command("ip", "addr", "del", cidr, "dev", "lo").CombinedOutput(); err != nil {
			return fmt.Errorf("removing %s from lo: %v: %s", cidr, err, out)
		}
		return nil
	}, nil
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

// waitKubeVirtReady waits until virt-api serves the subresource API through
// the aggregator, virt-controller holds its leader lease, and the node is
// registered.
func waitKubeVirtReady(ctx context.Context, cp *clusterlite.ControlPlane, node string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	kv, err := kubecli.GetKubevirtClientFromRESTConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	checks := []struct {
		what string
		ok   func() (bool, string)
	}{
		{"virt-api serves subresources.kubevirt.io through the aggregator", func() (bool, string) {
			u, err := dyn.Resource(apiServices).Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			conds, _, _ := unstructuredSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Available" {
					return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
				}
			}
			return false, "no Available condition yet"
		}},
		{"virt-controller holds its leader lease", func() (bool, string) {
			l, err := kv.CoordinationV1().Leases("kubevirt").Get(ctx, "virt-controller", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder"
		}},
		{"the node is registered and Ready", func() (bool, string) {
			n, err := kv.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range n.Status.Conditions {
				if c.Type == k8sv1.NodeReady {
					return c.Status == k8sv1.ConditionTrue, string(c.Status)
				}
			}
			return false, "no Ready condition"
		}},
		{"virt-controller has started its controllers (KubeVirt object seen)", func() (bool, string) {
			_, err := kv.VirtualMachine(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
			return true, ""
		}},
	}
	for _, c := range checks {
		begin := time.Now()
		last := ""
		for {
			ok, why := c.ok()
			if ok {
				log.Info("ready", "check", c.what, "after", time.Since(begin).Round(10*time.Millisecond))
				break
			}
			last = why
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting until %s: %w (last: %s)", c.what, ctx.Err(), last)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// unstructuredSlice reads a nested slice from an unstructured object.
func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[f]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// writePIDs records every process the stack started, for whoever checks
// that tear-down leaves none.
func writePIDs(path string, cp *clusterlite.ControlPlane, comps []*component) error {
	var b strings.Builder
	for _, pid := range cp.PIDs() {
		fmt.Fprintln(&b, pid)
	}
	for _, c := range comps {
		c.mu.Lock()
		for _, pid := range c.pids {
			fmt.Fprintln(&b, pid)
		}
		c.mu.Unlock()
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// chooseRuntime picks how the node agent runs launcher pods
// (--launcher-runtime): podman when asked, or in auto mode when podman
// works here with an overlay store and has the launcher image; otherwise
// bare processes (nil), said once at warn level in auto mode. cacheDir
// becomes the containers' shared QEMU capability cache.
func chooseRuntime(ctx context.Context, o upOptions, cacheDir string, log *slog.Logger) (nodeagent.Runtime, error) {
	if o.runtime == "process" {
		log.Info("launcher pods run as bare processes", "launcher", o.launcher, "why", "--launcher-runtime=process")
		return nil, nil
	}
	p := &nodeagent.Podman{CacheDir: cacheDir, KVM: hostKVM(), Logger: log}
	err := p.Check(ctx, launcherImage)
	if err == nil {
		err = p.RemoveLeftovers(ctx, o.nodeName)
	}
	if err == nil {
		err = os.MkdirAll(cacheDir, 0o755)
	}
	if err != nil {
		if o.runtime == "podman" {
			return nil, fmt.Errorf("--launcher-runtime=podman: %w", err)
		}
		log.Warn("no container runtime works: launcher pods run as bare processes, without cgroup limits", "launcher", o.launcher, "why", err)
		return nil, nil
	}
	log.Info("launcher pods run as podman containers", "image", launcherImage, "kvm", p.KVM)
	return p, nil
}

// hostKVM reports whether the node has KVM that runs ordinary guests: a
// hardware KVM module (kvm_intel, kvm_amd; not kvm_pvm) and /dev/kvm.
// Only then do the containers get /dev/kvm.
func hostKVM() bool {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat(filepath.Join("/sys/module", m)); err == nil {
			return true
		}
	}
	return false
}
