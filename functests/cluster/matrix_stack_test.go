package cluster_test

import (
	"fmt"
	"os"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
)

// The node side the differential matrix runs on. By default KubeVirt's own
// virt-handler (the suite's shared virt-handler stack), so that every VMI
// phase the VM controller reads on KubeVirt's side is KubeVirt's; the
// lane's own stack, where our node agent plays virt-handler, when
// virt-handler is not built here (said in the artifact), or when
// CLUSTER_LANE_MATRIX_NODE_SIDE=agent asks for it. The matrix runs once
// per suite run, on one of them.

const (
	nodeSideVirtHandler = "virt-handler"
	nodeSideAgent       = "agent"
	// matrixNodeSideEnv picks the matrix's node side.
	matrixNodeSideEnv = "CLUSTER_LANE_MATRIX_NODE_SIDE"
)

// matrixSide is the cluster the matrix's KubeVirt VMs run on.
type matrixSide struct {
	kc kubecli.KubevirtClient
	// side is nodeSideVirtHandler or nodeSideAgent on cluster-lite, ""
	// on a cluster at KUBECONFIG (its own node side, whatever it is).
	side string
	// note says why the side is not the default one, for the artifact.
	note string
}

// describe is the artifact's sentence on the node side.
func (s matrixSide) describe() string {
	var d string
	switch s.side {
	case nodeSideVirtHandler:
		d = "Node side: KubeVirt's own virt-handler (`clusterlite up --node-side virt-handler`), our node agent as kubelet only; our launcher image in KubeVirt mode in each launcher pod."
	case nodeSideAgent:
		d = "Node side: our node agent playing kubelet and virt-handler (the lane's own stack), our launcher in its pods."
	default:
		d = "Node side: the cluster at KUBECONFIG's own."
	}
	if s.note != "" {
		d += " " + s.note
	}
	return d
}

// matrixStack picks the matrix's cluster: the suite's virt-handler stack
// or the lane's own, as matrixNodeSideEnv asks, by default the first when
// it can run here. An explicit virt-handler that cannot run fails the
// matrix rather than quietly running it elsewhere.
func matrixStack(ctx SpecContext) matrixSide {
	want := os.Getenv(matrixNodeSideEnv)
	if lite == nil {
		s := matrixSide{kc: client}
		if want != "" {
			s.note = fmt.Sprintf("(%s=%s does not apply: the lane has no cluster-lite.)", matrixNodeSideEnv, want)
		}
		return s
	}
	switch want {
	case nodeSideAgent:
		return matrixSide{kc: client, side: nodeSideAgent, note: fmt.Sprintf("(Asked for with %s=%s.)", matrixNodeSideEnv, want)}
	case nodeSideVirtHandler, "":
		if why := virtHandlerUnavailable(); why != "" {
			if want != "" {
				Fail(fmt.Sprintf("%s=%s, but the virt-handler stack cannot run here: %s", matrixNodeSideEnv, want, why))
			}
			fmt.Fprintf(GinkgoWriter, "the matrix runs on the agent stack: %s\n", why)
			return matrixSide{kc: client, side: nodeSideAgent, note: "(Not the default, virt-handler: " + why + ".)"}
		}
		_, kc := virtHandlerStack(ctx)
		return matrixSide{kc: kc, side: nodeSideVirtHandler}
	}
	Fail(fmt.Sprintf("%s=%q: want %s or %s", matrixNodeSideEnv, want, nodeSideVirtHandler, nodeSideAgent))
	return matrixSide{}
}

// withPodNetwork gives a matrix VM the pod network through a masquerade
// interface, on both controllers and both node sides, so that all four
// VMs of a row share one manifest whichever stack runs it. Why not
// KubeVirt's default, a bridge interface on the pod network (v1.6.0's
// DefaultNetworkInterface, pkg/virt-config/virt-config.go): virt-handler's
// bridge binding moves the pod's address to a dummy link
// (NetPod.bridgeBindingSpec, pkg/network/setup/netpod/netpod.go), a link
// type this kernel lacks, so a VMI that reaches virt-handler would never
// start. Why not autoattachPodInterface:
// false (the other virt-handler specs' choice): the rows whose VMIs reach
// virt-handler (clear-running, running-fail, rerun-succeeded,
// scheduled-stop) then run its phase-1 network set-up (and the monitor
// KubeVirt's phase 2) as a user's VM does,
// for about 0.1 s; the fail-fast rows' VMIs fail while Scheduling, before
// virt-handler sees them, so their network does not enter the result. The
// guest asks for no DHCP lease (no harness.dhcp), so what the guest does
// on the network plays no part in a row.
func withPodNetwork(vm *v1.VirtualMachine) *v1.VirtualMachine {
	spec := &vm.Spec.Template.Spec
	spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
	spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
	return vm
}

// matrixVM is the fail-fast VM of a matrix row (crashingVM) with its pod
// network.
func matrixVM(name string, strategy v1.VirtualMachineRunStrategy, testGuest bool) *v1.VirtualMachine {
	return withPodNetwork(crashingVM(name, strategy, testGuest))
}

// Where the two node sides differ for a launcher that fails at once (the
// fail-fast rows' VMIs), as the row's first failed KubeVirt VMI shows it.
// virt-controller hands a VMI over (Scheduled) only once its pod is ready,
// and fails it itself while it is Scheduling when the pod is down
// (Controller.updateStatus, pkg/virt-controller/watch/vmi/lifecycle.go,
// IsPodReady and IsPodDownOrGoingDown). Our node agent as virt-handler
// reports the pod Running when compute starts, so the VMI is handed over
// and the agent fails it; as kubelet under KubeVirt's virt-handler it
// reports Running only once podman shows every container running, as
// kubelet does from the runtime's state, and the fail-fast compute ends
// first: virt-controller fails the VMI while Scheduling and virt-handler
// never sees it. The VM controller counts a final VMI that never ran
// whoever wrote its phase, so the rows' compared fields do not move.
var failedPathBySide = map[string]struct{ phases, manager, verdict string }{
	nodeSideVirtHandler: {"Pending → Scheduling → Failed", "virt-controller",
		"virt-handler: failed by virt-controller while Scheduling, its pod down before it was ready (never handed over)"},
	nodeSideAgent: {"Pending → Scheduling → Scheduled → Failed", "clusterlite",
		"agent: handed over (Scheduled) once compute started, failed by the agent as virt-handler"},
}

// addFailedPath records the phases and field managers of the row's first
// failed KubeVirt VMI against its node side's expectation
// (failedPathBySide); on a cluster at KUBECONFIG it only records them.
func addFailedPath(m *matrix, id string, p matrixPair) {
	const rule = "the first failed VMI's phases and field managers on KubeVirt's side (the node side's part)"
	const ours = "(not compared: our controller runs its launcher itself)"
	vmi := p.kvl.firstFailed()
	if vmi == nil {
		m.expect(id, rule, "no failed VMI seen", ours, false, "a failed VMI")
		return
	}
	managers := managersOf(vmi.ManagedFields)
	kv := fmt.Sprintf("%s, managers %s", phasePath(vmi), strings.Join(managers, ", "))
	want, checked := failedPathBySide[p.side]
	if !checked {
		m.expect(id, rule, kv, ours, true, "recorded, not checked: the cluster's own node side")
		return
	}
	// virt-handler writes to neither side's failed VMI, the agent only
	// where it plays virt-handler.
	ok := phasePath(vmi) == want.phases && slices.Contains(managers, want.manager) && !slices.Contains(managers, "virt-handler") &&
		(p.side == nodeSideAgent || !slices.Contains(managers, "clusterlite"))
	m.expect(id, rule, kv, ours, ok, want.verdict)
}
