package clusterlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
)

// KubeconfigFor returns the path of the kubeconfig of one of Config.Users
// (StateDir/kubeconfig-<user with ':' as '_'>), written by Start. The path
// of an unknown user names a file that does not exist.
func (cp *ControlPlane) KubeconfigFor(user string) string {
	return filepath.Join(cp.cfg.StateDir, "kubeconfig-"+strings.ReplaceAll(user, ":", "_"))
}

// RESTConfigFor returns a new client configuration for one of Config.Users;
// nil for a user that Start was not given.
func (cp *ControlPlane) RESTConfigFor(user string) *rest.Config {
	tok, ok := cp.userTokens[user]
	if !ok {
		return nil
	}
	return restConfig(cp.server, cp.ca.CertPEM(), tok)
}

// IssueClientCert issues a client certificate signed by the control plane's
// CA (the API server trusts it through --client-ca-file).
func (cp *ControlPlane) IssueClientCert(commonName string, groups []string) (certPEM, keyPEM []byte, err error) {
	return cp.ca.IssueClientCert(commonName, groups)
}

// PIDs lists the process ids of etcd and the API server.
func (cp *ControlPlane) PIDs() []int {
	var pids []int
	for _, c := range []*child{cp.etcd, cp.apiserver} {
		if c != nil {
			pids = append(pids, c.proc.PID())
		}
	}
	return pids
}

// Process is a program started next to the control plane by StartProcess,
// such as KubeVirt's virt-controller: in its own process group, killed by
// the kernel if this process dies, its output in StateDir/logs/<name>.log.
type Process struct {
	c    *child
	stop func(ctx context.Context) error
}

// StartProcess starts bin with args as a process of the control plane.
// Stop stops every such process, the latest first, before the API server;
// Process.Stop stops one earlier.
func (cp *ControlPlane) StartProcess(name, bin string, args []string) (*Process, error) {
	logPath := filepath.Join(cp.cfg.StateDir, "logs", name+".log")
	c, err := startChild(cp.spawner, cp.log, name, bin, args, cp.cfg.StateDir, logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{c: c}
	grace := cp.cfg.StopTimeout
	p.stop = func(ctx context.Context) error {
		cp.procsMu.Lock()
		for i, q := range cp.procs {
			if q == p {
				cp.procs = append(cp.procs[:i], cp.procs[i+1:]...)
				break
			}
		}
		cp.procsMu.Unlock()
		if c.proc.Exited() {
			return nil // reported through Done and Err
		}
		return c.stop(ctx, grace)
	}
	cp.procsMu.Lock()
	cp.procs = append(cp.procs, p)
	cp.procsMu.Unlock()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.c.proc.PID() }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.c.proc.Done() }

// Err describes how the process ended, with the end of its log; nil while
// it runs.
func (p *Process) Err() error {
	if !p.c.proc.Exited() {
		return nil
	}
	return p.c.exitError()
}

// LogPath is the file that receives the process's output.
func (p *Process) LogPath() string { return p.c.logPath }

// Stop sends SIGTERM to the process group, then SIGKILL after the control
// plane's StopTimeout or when ctx ends. Stopping a process that has already
// ended is not an error.
func (p *Process) Stop(ctx context.Context) error { return p.stop(ctx) }
