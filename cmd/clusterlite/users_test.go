package main

import (
	"slices"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/clusterlite"
)

func TestAgentIdentities(t *testing.T) {
	// As virt-handler the agent writes VMIs: virt-handler's service
	// account, which KubeVirt's webhooks let write VMI status.
	kubelet, scheduler := agentUsers(upOptions{nodeSide: nodeSideAgent, nodeName: "n1"})
	if kubelet != handlerUser || scheduler != handlerUser {
		t.Errorf("--node-side agent: kubelet %q, scheduler %q, want %q for both", kubelet, scheduler, handlerUser)
	}
	users := stackUsers(upOptions{nodeSide: nodeSideAgent, nodeName: "n1"})
	if len(users) != 3 {
		t.Errorf("--node-side agent: users %+v, want KubeVirt's three only", users)
	}
	for _, u := range users {
		if !slices.Contains(u.TokenGroups(), clusterlite.MastersGroup) {
			t.Errorf("KubeVirt's %s is not in system:masters: %v", u.Name, u.TokenGroups())
		}
	}

	// As kubelet only: a real kubelet's identity, and the scheduler's for
	// the binding, neither in system:masters.
	o := upOptions{nodeSide: nodeSideHandler, nodeName: "n1"}
	kubelet, scheduler = agentUsers(o)
	if kubelet != "system:node:n1" || scheduler != "system:kube-scheduler" {
		t.Errorf("--node-side virt-handler: kubelet %q, scheduler %q", kubelet, scheduler)
	}
	groups := map[string][]string{}
	for _, u := range stackUsers(o) {
		groups[u.Name] = u.TokenGroups()
	}
	if g := groups[kubelet]; !slices.Equal(g, []string{clusterlite.NodesGroup}) {
		t.Errorf("kubelet's groups %v, want system:nodes only", g)
	}
	if g, ok := groups[scheduler]; !ok || slices.Contains(g, clusterlite.MastersGroup) {
		t.Errorf("scheduler's groups %v (present %v), want a token outside system:masters", g, ok)
	}
	if g := groups[handlerUser]; !slices.Contains(g, clusterlite.MastersGroup) {
		t.Errorf("virt-handler's groups %v, want system:masters", g)
	}
}
