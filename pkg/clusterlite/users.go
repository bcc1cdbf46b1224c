package clusterlite

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
)

// Groups and users that Kubernetes' authorizers know by name.
const (
	// MastersGroup is allowed everything, before any authorizer is asked.
	MastersGroup = "system:masters"
	// NodesGroup is the group of every kubelet; the Node authorizer and
	// the NodeRestriction admission plugin confine a member whose user is
	// NodeUser(name) to that node's objects.
	NodesGroup = "system:nodes"
	// SchedulerUser is kube-scheduler's user, which RBAC's bootstrap policy
	// binds to the system:kube-scheduler ClusterRole: it may read pods and
	// bind them to nodes, which a kubelet may not.
	SchedulerUser = "system:kube-scheduler"
	// nodeUserPrefix starts the user name of a node's kubelet.
	nodeUserPrefix = "system:node:"
	// serviceAccountPrefix starts the user name of a service account.
	serviceAccountPrefix = "system:serviceaccount:"
)

// User is one of Config.Users: an identity that Start gives a token and a
// kubeconfig.
type User struct {
	// Name is the user name the API server authenticates the token as.
	Name string
	// Groups are added to the groups its name implies (see TokenGroups).
	Groups []string
}

// NodeUser is the user name of node's kubelet, the one the Node authorizer
// recognizes (with NodesGroup, which TokenGroups gives it).
func NodeUser(node string) string { return nodeUserPrefix + node }

// TokenGroups is the user's groups in the token file: a service account's
// ("system:serviceaccounts" and "system:serviceaccounts:<namespace>") and
// a node's (NodesGroup) as the API server gives them to real service
// accounts and kubelets, then u.Groups; "system:authenticated" when that
// leaves none (the API server adds it to every user anyway).
func (u User) TokenGroups() []string {
	var groups []string
	if sa, ok := strings.CutPrefix(u.Name, serviceAccountPrefix); ok {
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+strings.SplitN(sa, ":", 2)[0])
	}
	if strings.HasPrefix(u.Name, nodeUserPrefix) {
		groups = append(groups, NodesGroup)
	}
	for _, g := range u.Groups {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		groups = []string{"system:authenticated"}
	}
	return groups
}

// tokenLine is the line of --token-auth-file that authenticates token as
// u: token,user,uid,"group1,group2".
func tokenLine(token string, u User) (string, error) {
	if u.Name == "" || strings.ContainsAny(u.Name, ",\"\n") {
		return "", fmt.Errorf("user name %q: must be non-empty, without commas, quotes or newlines", u.Name)
	}
	groups := u.TokenGroups()
	for _, g := range groups {
		if g == "" || strings.ContainsAny(g, ",\"\n") {
			return "", fmt.Errorf("group %q of user %s: must be non-empty, without commas, quotes or newlines", g, u.Name)
		}
	}
	return fmt.Sprintf("%s,%s,%s,\"%s\"\n", token, u.Name, u.Name, strings.Join(groups, ",")), nil
}

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
