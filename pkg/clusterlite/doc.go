// Package clusterlite runs a real, single-member Kubernetes control plane in
// a network namespace of its own: an etcd and a kube-apiserver, built from
// Go modules by tools/clusterlite/build.sh, started as child processes of
// the calling program, with the API server reached from the host's
// 127.0.0.1 through a forward. Addresses that Endpoints accept (not
// loopback) go on the namespace's lo (AddAddress); the host's network is
// never changed. Beside the control plane it runs KubeVirt's components
// (StartProcess, optionally restarted with a backoff), issues their
// certificates, waits for them and picks the node agent's runtime.
//
// The control plane has no kube-controller-manager, no scheduler and no
// kubelet. It authenticates one admin token (group system:masters) and a
// token per Config.Users, and authorizes as a cluster does: the Node
// authorizer and the NodeRestriction admission plugin confine a node's
// kubelet (NodeUser, group system:nodes) to its node's objects, RBAC's
// bootstrap policy grants the rest (kube-scheduler's binding, say), and
// system:masters is allowed everything. It generates its own certificate
// authority on every start; IssueServingCert hands out serving certificates
// from it so that other components (for example an aggregated API server
// such as KubeVirt's virt-api) are trusted by every client that trusts the
// API server. The aggregation layer is configured with a separate
// front-proxy CA and routes to an APIService's endpoints, not to its
// service's cluster IP.
//
// Children run in their own process group and get SIGKILL from the kernel
// when the calling process dies (a parent-death signal, armed from a thread
// that lives as long as the control plane), so a crashed test leaves no
// etcd or kube-apiserver behind, and the namespace, which has no name, is
// freed by the kernel with them.
package clusterlite
