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
// for about 0.1 s; the fail-fast rows' launchers end before a network
// could be set up for them (their VMIs mostly fail while Scheduling,
// before virt-handler sees them; failedPathsBySide), so their network
// does not enter the result. The
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

// failedPath is one way a fail-fast VMI can end on a node side: its
// phases, the field manager that must be among its managers, and the
// verdict the fidelity table shows.
type failedPath struct{ phases, manager, verdict string }

// Where the two node sides differ for a launcher that fails at once (the
// fail-fast rows' VMIs), as the row's first failed KubeVirt VMI shows it.
// virt-controller hands a VMI over (Scheduled) only once its pod is ready
// (compute running, every other container ready) and fails it itself
// while it is Scheduling when the pod is down (Controller.updateStatus,
// pkg/virt-controller/watch/vmi/lifecycle.go, IsPodReady and
// IsPodDownOrGoingDown); a Scheduled VMI whose pod is down but still there
// is virt-handler's to fail. Our node agent as virt-handler reports the
// pod Running when compute starts, so the VMI is always handed over and
// the agent fails it. As kubelet under KubeVirt's virt-handler the agent
// reports container states from podman's (as kubelet does from the
// runtime's), polled while the pod starts, and the fail-fast compute lives
// for a moment: mostly it has ended by the first look that sees every
// container, so virt-controller fails the VMI while Scheduling and
// virt-handler never sees it, but on a loaded machine (CI's stop 30 run,
// two cores and every suite at once) a look can catch compute running, the
// VMI is handed over and virt-handler fails it. Real kubelet has the same
// race between its relist and a container that exits at once, so both
// paths are KubeVirt's and both are accepted, each whole: its phases, its
// writer, and nothing written by the agent. The VM controller counts a
// final VMI that never ran whoever wrote its phase, so the rows' compared
// fields do not move.
var failedPathsBySide = map[string][]failedPath{
	nodeSideVirtHandler: {
		{"Pending → Scheduling → Failed", "virt-controller",
			"virt-handler: failed by virt-controller while Scheduling, its pod down before it was ready (never handed over)"},
		{"Pending → Scheduling → Scheduled → Failed", "virt-handler",
			"virt-handler: handed over while compute still ran, then failed by virt-handler (kubelet's status race, see failedPathsBySide)"},
	},
	nodeSideAgent: {
		{"Pending → Scheduling → Scheduled → Failed", "clusterlite",
			"agent: handed over (Scheduled) once compute started, failed by the agent as virt-handler"},
	},
}

// matches reports whether a failed VMI's phases and managers are this
// path on side: the phases, the path's writer, virt-controller, no
// virt-handler where the path is virt-controller's, and the agent only
// where it plays virt-handler.
func (f failedPath) matches(side, phases string, managers []string) bool {
	return phases == f.phases && slices.Contains(managers, f.manager) && slices.Contains(managers, "virt-controller") &&
		(f.manager == "virt-handler" || !slices.Contains(managers, "virt-handler")) &&
		(side == nodeSideAgent || !slices.Contains(managers, "clusterlite"))
}

// addFailedPath records the phases and field managers of the row's first
// failed KubeVirt VMI against its node side's expectation
// (failedPathsBySide); on a cluster at KUBECONFIG it only records them.
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
	paths, checked := failedPathsBySide[p.side]
	if !checked {
		m.expect(id, rule, kv, ours, true, "recorded, not checked: the cluster's own node side")
		return
	}
	var expected []string
	for _, f := range paths {
		if f.matches(p.side, phasePath(vmi), managers) {
			m.expect(id, rule, kv, ours, true, f.verdict)
			return
		}
		expected = append(expected, f.verdict)
	}
	m.expect(id, rule, kv, ours, false, strings.Join(expected, "; or "))
}
