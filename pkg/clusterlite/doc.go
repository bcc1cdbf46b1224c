// Package clusterlite runs a real, single-member Kubernetes control plane on
// loopback: an etcd and a kube-apiserver, built from Go modules by
// tools/clusterlite/build.sh, started as child processes of the calling
// program.
//
// The control plane has no kube-controller-manager, no scheduler and no
// kubelet. It authenticates one admin token (group system:masters) and
// authorizes everything (AlwaysAllow). It generates its own certificate
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
// etcd or kube-apiserver behind.
package clusterlite
