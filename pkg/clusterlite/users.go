package clusterlite

import (
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
