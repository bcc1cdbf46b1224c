package main

import "github.com/crashloop-harness/crashloop/pkg/clusterlite"

// stackUsers are the identities the API server gets tokens for.
// KubeVirt's components are in system:masters, so that authorization
// allows them everything, as AlwaysAllow did before the API server
// authorized anyone (their names still tell KubeVirt's webhooks who
// writes). With KubeVirt's virt-handler on the node, the agent's kubelet
// part is the node's kubelet and its binding is the scheduler's
// (agentUsers): neither is in system:masters, so the Node authorizer,
// NodeRestriction and RBAC confine them.
func stackUsers(o upOptions) []clusterlite.User {
	masters := []string{clusterlite.MastersGroup}
	users := []clusterlite.User{{Name: controllerUser, Groups: masters}, {Name: apiUser, Groups: masters}, {Name: handlerUser, Groups: masters}}
	if kubelet, scheduler := agentUsers(o); kubelet != handlerUser {
		users = append(users, clusterlite.User{Name: kubelet}, clusterlite.User{Name: scheduler})
	}
	return users
}

// agentUsers are the node agent's identities: the one of its kubelet part
// (pods bound to the node, their status, the node's status; as virt-handler
// also VMIs) and the one that binds pods to the node. As virt-handler
// (--node-side agent) both are virt-handler's service account, which
// KubeVirt's webhooks let write VMI status. As kubelet only (--node-side
// virt-handler) they are a real kubelet's and kube-scheduler's, which may
// not write VMIs.
func agentUsers(o upOptions) (kubelet, scheduler string) {
	if o.nodeSide == nodeSideHandler {
		return clusterlite.NodeUser(o.nodeName), clusterlite.SchedulerUser
	}
	return handlerUser, handlerUser
}
