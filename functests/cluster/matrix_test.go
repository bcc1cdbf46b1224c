package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/cluster"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/pkg/vmops"
)

// The differential matrix: each row drives one VM on KubeVirt's own
// controller and the same manifest on ours (both at KubeVirt's real time
// scale) into a situation, does the same request on both, and compares
// the outcome (HTTP status against our exit code, and the message) and
// the VM's fields. Rows run concurrently, each on its own pair of VMs.

// vmState is the fields compared between the two controllers.
type vmState struct {
	Count       int
	UIDSet      bool
	Printable   string
	VMI         bool
	Requests    string
	RunStrategy string
}

func (s vmState) String() string {
	return fmt.Sprintf("count %d uid %v %s vmi %v requests [%s] runStrategy %s", s.Count, s.UIDSet, s.Printable, s.VMI, s.Requests, s.RunStrategy)
}

func stateOf(vm *v1.VirtualMachine, vmiExists bool) vmState {
	s := vmState{Printable: string(vm.Status.PrintableStatus), VMI: vmiExists}
	if sf := vm.Status.StartFailure; sf != nil {
		s.Count, s.UIDSet = sf.ConsecutiveFailCount, sf.LastFailedVMIUID != ""
	}
	var reqs []string
	for _, r := range vm.Status.StateChangeRequests {
		reqs = append(reqs, string(r.Action))
	}
	s.Requests = strings.Join(reqs, ",")
	if rs, err := vm.RunStrategy(); err == nil {
		s.RunStrategy = string(rs)
	}
	return s
}

// outcome is one request's answer: 202 or the refusal's code, and its
// message with the VM's name replaced by NAME.
type outcome struct {
	Code int
	Msg  string
}

func (o outcome) String() string {
	if o.Code == http.StatusAccepted {
		return "202"
	}
	return fmt.Sprintf("%d %s", o.Code, o.Msg)
}

// matrixPair is one row's two VMs.
type matrixPair struct {
	kvName, ourName, state string
	// kc is the client of the cluster the KubeVirt VM runs on, and side
	// that cluster's node side (matrixSide.side).
	kc   kubecli.KubevirtClient
	side string
	// kvl follows the KubeVirt VM and every VMI of it (also those deleted
	// within milliseconds of failing), for their phase timestamps.
	kvl *kvLoop
	// proc is our controller, for its events.
	proc *ctlharness.Proc
}

func (p matrixPair) kv(ctx context.Context) (*v1.VirtualMachine, vmState) {
	vm, err := p.kc.VirtualMachine(namespace()).Get(ctx, p.kvName, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = p.kc.VirtualMachineInstance(namespace()).Get(ctx, p.kvName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	return vm, stateOf(vm, err == nil)
}

func (p matrixPair) ours(ctx context.Context) (*v1.VirtualMachine, vmState) {
	snap := p.ourSnapshot(ctx)
	return snap.VM, stateOf(snap.VM, snap.VMI != nil)
}

func (p matrixPair) kvDo(ctx context.Context, op vmops.Op) outcome {
	vms := p.kc.VirtualMachine(namespace())
	var err error
	switch op {
	case vmops.OpStart:
		err = vms.Start(ctx, p.kvName, &v1.StartOptions{})
	case vmops.OpStop:
		err = vms.Stop(ctx, p.kvName, &v1.StopOptions{})
	case vmops.OpRestart:
		err = vms.Restart(ctx, p.kvName, &v1.RestartOptions{})
	}
	if err == nil {
		return outcome{Code: http.StatusAccepted}
	}
	var st apierrors.APIStatus
	Expect(errors.As(err, &st)).To(BeTrue(), "KubeVirt %s of %s: %v", op, p.kvName, err)
	return outcome{Code: int(st.Status().Code), Msg: strings.ReplaceAll(err.Error(), p.kvName, "NAME")}
}

func (p matrixPair) ourDo(op vmops.Op) outcome {
	_, errs, code := ctlharness.CLI(bins.Controller, string(op), p.ourName, "--state-dir", p.state)
	if code == 0 {
		return outcome{Code: http.StatusAccepted}
	}
	return outcome{Code: code, Msg: strings.TrimSpace(strings.ReplaceAll(errs, p.ourName, "NAME"))}
}

// sameOutcome: both accepted, or both refused (exit 1, "refused") with
// KubeVirt's message in ours.
func sameOutcome(kv, ours outcome) bool {
	if kv.Code == http.StatusAccepted || ours.Code == http.StatusAccepted {
		return kv.Code == ours.Code
	}
	return ours.Code == 1 && strings.Contains(ours.Msg, kv.Msg)
}

// matrixRow is one line of the fidelity artifact.
type matrixRow struct {
	ID, Rule, KubeVirt, Ours, Verdict string
	OK                                bool
}

type matrix struct {
	mu   sync.Mutex
	rows []matrixRow
}

// add records a row: same when kv and ours agree, the named deviation
// when they differ as the row says, a failure otherwise.
func (m *matrix) add(id, rule, kv, ours string, same bool, deviation string) {
	r := matrixRow{ID: id, Rule: rule, KubeVirt: kv, Ours: ours}
	switch {
	case same && deviation == "":
		r.Verdict, r.OK = "same", true
	case !same && deviation != "":
		r.Verdict, r.OK = deviation, true
	case same:
		r.Verdict = "same, but " + deviation + " was expected"
	default:
		r.Verdict = "DIFFERENT"
	}
	m.append(r)
}

// expect records a row checked against a written expectation instead of
// against our controller: ok says whether it held, verdict names it.
func (m *matrix) expect(id, rule, kv, ours string, ok bool, verdict string) {
	r := matrixRow{ID: id, Rule: rule, KubeVirt: kv, Ours: ours, Verdict: verdict, OK: ok}
	if !ok {
		r.Verdict = "DIFFERENT from the expectation: " + verdict
	}
	m.append(r)
}

func (m *matrix) append(r matrixRow) {
	m.mu.Lock()
	m.rows = append(m.rows, r)
	m.mu.Unlock()
}

// markdown is the table, with KubeVirt's column named after version.
func (m *matrix) markdown(version string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	rows := append([]matrixRow(nil), m.rows...)
	slices.SortStableFunc(rows, func(a, b matrixRow) int { return strings.Compare(a.ID, b.ID) })
	var b strings.Builder
	fmt.Fprintf(&b, "| Row | Rule | KubeVirt %s (observed) | Ours (observed) | Verdict |\n|---|---|---|---|---|\n", version)
	esc := strings.NewReplacer("|", `\|`, "\n", " ")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.ID, esc.Replace(r.Rule), esc.Replace(r.KubeVirt), esc.Replace(r.Ours), esc.Replace(r.Verdict))
	}
	return b.String()
}

var _ = Describe("differential matrix: the same requests on KubeVirt's controller and on ours", Ordered, func() {
	var (
		ctx    context.Context
		work   string
		state  string
		suffix string
		m      matrix
		stack  matrixSide
		began  time.Time
	)
	type plan struct {
		id       string
		strategy v1.VirtualMachineRunStrategy
		// ops run in order, each compared; deviation names the expected
		// difference of the last op.
		ops       []vmops.Op
		deviation string
		// haltedEdit edits runStrategy to Halted during the backoff
		// instead of a request.
		haltedEdit bool
		// vm builds the row's VM when it is not the fail-fast one
		// (crashingVM); testGuest as for crashingVM. Every row's VMs get
		// the pod network of withPodNetwork.
		vm func(name string, testGuest bool) *v1.VirtualMachine
		// run drives a row that is not requests in backoff
		// (matrix_rows_test.go) instead of runPlan.
		run func(ctx context.Context, m *matrix, p matrixPair, work string)
		// needsLite: the row needs our launcher on the cluster's node
		// (its faults, the test guest), so it runs on cluster-lite only,
		// on either node side: under KubeVirt's virt-handler our launcher
		// image runs in KubeVirt mode and reads its faults from the VMI's
		// annotations.
		needsLite bool
	}
	plans := []plan{
		{id: "always-start", strategy: v1.RunStrategyAlways, ops: []vmops.Op{vmops.OpStart}},
		{id: "always-restart", strategy: v1.RunStrategyAlways, ops: []vmops.Op{vmops.OpRestart}},
		{id: "always-stop", strategy: v1.RunStrategyAlways, ops: []vmops.Op{vmops.OpStop}},
		{id: "rerun-start", strategy: v1.RunStrategyRerunOnFailure, ops: []vmops.Op{vmops.OpStart}},
		{id: "rerun-restart", strategy: v1.RunStrategyRerunOnFailure, ops: []vmops.Op{vmops.OpRestart}},
		{id: "rerun-stop", strategy: v1.RunStrategyRerunOnFailure, ops: []vmops.Op{vmops.OpStop}, deviation: vmops.DeviationStopRerunOnFailure},
		{id: "rerun-halted", strategy: v1.RunStrategyRerunOnFailure, haltedEdit: true},
		{id: "once-start", strategy: v1.RunStrategyOnce, ops: []vmops.Op{vmops.OpStart}},
		{id: "once-restart", strategy: v1.RunStrategyOnce, ops: []vmops.Op{vmops.OpRestart}},
		{id: "once-stop", strategy: v1.RunStrategyOnce, ops: []vmops.Op{vmops.OpStop}},
		{id: "manual", strategy: v1.RunStrategyManual, ops: []vmops.Op{vmops.OpRestart, vmops.OpStop, vmops.OpStart}},
		{id: "clear-running", strategy: v1.RunStrategyAlways, run: runClearOnRunning, needsLite: true},
		{id: "running-fail", strategy: v1.RunStrategyAlways, run: runFailureAfterRunning, needsLite: true},
		{id: "rerun-succeeded", strategy: v1.RunStrategyRerunOnFailure, vm: poweroffVM, run: runRerunSucceeded, needsLite: true},
		{id: "template-edit", strategy: v1.RunStrategyAlways, run: runTemplateEdit},
		{id: "scheduled-stop", strategy: v1.RunStrategyAlways, run: runStopWhileScheduled, needsLite: true},
	}
	pairs := map[string]matrixPair{}

	BeforeAll(func(sctx SpecContext) {
		stack = matrixStack(sctx)
		fmt.Fprintln(GinkgoWriter, stack.describe())
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.Background())
		DeferCleanup(cancel)
		var err error
		work, err = os.MkdirTemp("", "cluster-lane-matrix-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, work)
		state = filepath.Join(work, "state")
		suffix = fmt.Sprintf("%d", time.Now().Unix()%100000)
		var manifests []string
		// CLUSTER_LANE_MATRIX_ROWS=id,id,... runs only those rows.
		only := strings.FieldsFunc(os.Getenv("CLUSTER_LANE_MATRIX_ROWS"), func(r rune) bool { return r == ',' || r == ' ' })
		for _, p := range plans {
			if len(only) > 0 && !slices.Contains(only, p.id) {
				continue
			}
			if p.needsLite && lite == nil {
				fmt.Fprintf(GinkgoWriter, "row %s left out: it needs our launcher on the cluster's node (cluster-lite)\n", p.id)
				continue
			}
			pair := matrixPair{kvName: "kv-" + p.id + "-" + suffix, ourName: "ours-" + p.id + "-" + suffix, state: state, kc: stack.kc, side: stack.side}
			pair.kvl = &kvLoop{name: pair.kvName, strategy: p.strategy, kc: stack.kc, attempts: map[types.UID]cluster.Attempt{}}
			build := func(name string, testGuest bool) *v1.VirtualMachine { return crashingVM(name, p.strategy, testGuest) }
			if p.vm != nil {
				build = p.vm
			}
			createVMs(ctx, stack.kc, withPodNetwork(build(pair.kvName, lite != nil)))
			pair.kvl.follow(ctx)
			manifests = append(manifests, writeVM(work, withPodNetwork(build(pair.ourName, true))))
			pairs[p.id] = pair
		}
		began = time.Now()
		proc := ctlharness.Start(bins, state, work, int(time.Now().UnixNano()%1000), nil, manifests...)
		for id, pair := range pairs {
			pair.proc = proc
			pairs[id] = pair
		}
	})

	It("answers every row the same on both controllers, or with the one written deviation", func() {
		var wg sync.WaitGroup
		for _, p := range plans {
			pair, ok := pairs[p.id]
			if !ok {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				if p.run != nil {
					p.run(ctx, &m, pair, work)
					return
				}
				runPlan(ctx, &m, pair, p.id, p.strategy, p.ops, p.deviation, p.haltedEdit, work)
			}()
		}
		wg.Wait()

		took := time.Since(began)
		version := kubevirtVersionOf(ctx, stack.kc)
		md := m.markdown(version)
		fmt.Fprint(GinkgoWriter, md)
		out := built.Path("artifacts", "fidelity.md")
		header := "# Fidelity to KubeVirt " + version + ", observed by the cluster lane\n\n" + stack.describe() + "\n\n" +
			"Each row: the same manifest on KubeVirt's virt-controller and virt-api (cluster-lite) and on ours, " +
			"the same request, compared field by field (startFailure count and UID, printableStatus, whether a VMI exists, " +
			"stateChangeRequests, runStrategy) and by outcome (HTTP status against our exit code and message). " +
			fmt.Sprintf("%d rows, all at once, in %s.\n\n", len(pairs), took.Round(time.Second))
		Expect(os.WriteFile(out, []byte(header+md), 0o644)).To(Succeed())
		AddReportEntry("cluster-matrix", fmt.Sprintf("%s %d rows in %s", stack.describe(), len(pairs), took.Round(time.Second)))
		for _, r := range m.rows {
			Expect(r.OK).To(BeTrue(), "row %s (%s): KubeVirt %s, ours %s: %s", r.ID, r.Rule, r.KubeVirt, r.Ours, r.Verdict)
		}
	})
})

// runPlan drives one row: into the situation, then each request on both
// controllers, comparing outcomes and the fields they lead to. In a
// backoff each side gets its first request (or the Halted edit) at its own
// moment, at the same count (atBackoff).
func runPlan(ctx context.Context, m *matrix, p matrixPair, id string, strategy v1.VirtualMachineRunStrategy, ops []vmops.Op, deviation string, haltedEdit bool, work string) {
	var kvO, ourO outcome
	var kvVM, ourVM *v1.VirtualMachine
	var kvS, ourS vmState
	var ourRetry *time.Time
	// kvNext and ourNext: each side's state right after its first
	// request.
	var kvNext, ourNext vmState
	if strategy == v1.RunStrategyManual {
		// A VM just created has no printable status until each
		// controller's first sync.
		Eventually(func() bool {
			_, k := p.kv(ctx)
			_, o := p.ours(ctx)
			return k.Printable != "" && o.Printable != ""
		}).WithTimeout(time.Minute).WithPolling(250*time.Millisecond).Should(BeTrue(), "row %s: no printable status", id)
		kvVM, kvS = p.kv(ctx)
		ourVM, ourS = p.ours(ctx)
	} else {
		// Once never retries: its one failure, its VMI kept. The others:
		// failure matrixCount, with 20 s left for the request on a loaded
		// machine (the backoff of failure 2 is 40-60 s).
		ready := func(vm *v1.VirtualMachine, s vmState) bool {
			if strategy == v1.RunStrategyOnce {
				return s.Count == 1
			}
			return s.Count == matrixCount && inBackoff(vm, s, 20*time.Second)
		}
		// Each side's state right after its request, before the other
		// side's request comes (see compareRequest).
		kvAct := func() { kvO = p.kvDo(ctx, ops[0]); _, kvNext = p.kv(ctx) }
		ourAct := func() { ourO = p.ourDo(ops[0]); _, ourNext = p.ours(ctx) }
		if haltedEdit {
			halt := []byte(`[{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]`)
			kvAct = func() {
				_, err := p.kc.VirtualMachine(namespace()).Patch(ctx, p.kvName, types.JSONPatchType, halt, metav1.PatchOptions{})
				Expect(err).NotTo(HaveOccurred())
			}
			ourAct = func() { writeVM(work, matrixVM(p.ourName, v1.RunStrategyHalted, true)) }
		}
		kvVM, ourVM, kvS, ourS, ourRetry = atBackoff(ctx, p, id, ready, kvAct, ourAct)
	}
	m.add(id+" 0", fmt.Sprintf("%s, before any request (in backoff)", strategy), kvS.String(), ourS.String(), kvS == ourS, "")
	if strategy != v1.RunStrategyManual {
		addRetryBand(m, id+" 0r", p, kvVM, ourVM, ourRetry)
		addFailedPath(m, id+" 0p", p)
	}

	if haltedEdit {
		var kvRS, ourRS string
		Eventually(func() bool {
			_, k := p.kv(ctx)
			_, o := p.ours(ctx)
			kvRS, ourRS = k.RunStrategy, o.RunStrategy
			return kvRS == string(v1.RunStrategyAlways) && ourRS == string(v1.RunStrategyAlways)
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(BeTrue())
		m.add(id+" 1", "runStrategy: Halted edit during RerunOnFailure's backoff ({Start} pending)", "runStrategy "+kvRS, "runStrategy "+ourRS, kvRS == ourRS, "")
		return
	}

	for i, op := range ops {
		kvBefore, ourBefore := kvS, ourS
		if i > 0 || strategy == v1.RunStrategyManual {
			_, kvBefore = p.kv(ctx)
			_, ourBefore = p.ours(ctx)
			kvO, ourO = p.kvDo(ctx, op), p.ourDo(op)
			_, kvNext = p.kv(ctx)
			_, ourNext = p.ours(ctx)
		}
		dev := ""
		if i == len(ops)-1 {
			dev = deviation
		}
		compareRequest(ctx, m, p, fmt.Sprintf("%s %d", id, i+1), fmt.Sprintf("%s: %s, %s", op, strategy, kvBefore.Printable), kvO, ourO,
			[2]vmState{kvBefore, kvNext}, [2]vmState{ourBefore, ourNext}, dev)
	}
}

// compareRequest records one request's outcomes on both sides and where
// it leaves them; kv and ours are each side's state just before and just
// after its request. A refusal is judged on those: each side acts at its
// own moment, and the side that acted first may have counted its next
// failure by the time the other one acts.
func compareRequest(ctx context.Context, m *matrix, p matrixPair, id, rule string, kvO, ourO outcome, kv, ours [2]vmState, dev string) {
	m.add(id, rule, kvO.String(), ourO.String(), sameOutcome(kvO, ourO), dev)
	if kvO.Code != http.StatusAccepted && ourO.Code != http.StatusAccepted {
		// A refusal changes nothing, on either side.
		m.add(id+"'", rule+": state after the refusal", kv[1].String(), ours[1].String(),
			kv[1] == kv[0] && ours[1] == ours[0] && kv[1] == ours[1], "")
		return
	}
	// Accepted on at least one side: where both end up. A row that
	// expects them to agree waits for that (up to 3 minutes: under
	// KubeVirt's virt-handler a VMI started while the other rows' pods
	// start, on 2 cores, fails about a minute later); the deviation row
	// takes each side once it holds still.
	var kvAfter, ourAfter vmState
	if dev == "" {
		// The row records the last pair seen when they never agree.
		for deadline := time.Now().Add(3 * time.Minute); ; {
			_, kvAfter = p.kv(ctx)
			_, ourAfter = p.ours(ctx)
			if kvAfter == ourAfter || time.Now().After(deadline) {
				break
			}
			<-time.After(200 * time.Millisecond)
		}
	} else {
		kvAfter, ourAfter = settle(func() vmState { _, s := p.kv(ctx); return s }), settle(func() vmState { _, s := p.ours(ctx); return s })
	}
	m.add(id+"'", rule+": state after", kvAfter.String(), ourAfter.String(), kvAfter == ourAfter, dev)
}

// settle polls a state until it holds still for 3 s (at most 30 s)
// and returns it.
func settle(get func() vmState) vmState {
	var last vmState
	var since time.Time
	Eventually(func() bool {
		s := get()
		if s != last || since.IsZero() {
			last, since = s, time.Now()
			return false
		}
		return time.Since(since) >= 3*time.Second
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(BeTrue())
	return last
}
