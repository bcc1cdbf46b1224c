package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/cluster"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/controller"
)

const failFast = v1.FuncTestLauncherFailFastAnnotation

// crashingVM is a small VM whose launcher crashes at once (KubeVirt's own
// fail-fast annotation) under the given run strategy. On cluster-lite and
// for our controller it is the test guest every suite boots; on another
// cluster it uses a container disk (CLUSTER_LANE_IMAGE, cirros by default).
func crashingVM(name string, strategy v1.VirtualMachineRunStrategy, testGuest bool) *v1.VirtualMachine {
	if testGuest {
		vm := testguest.VM(name, strategy, map[string]string{failFast: ""}, "")
		vm.Namespace = namespace()
		return vm
	}
	grace := int64(10)
	return &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace()},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: &strategy,
			Template: &v1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{failFast: ""}},
				Spec: v1.VirtualMachineInstanceSpec{
					TerminationGracePeriodSeconds: &grace,
					Domain: v1.DomainSpec{
						Resources: v1.ResourceRequirements{Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("256Mi")}},
						Devices:   v1.Devices{Disks: []v1.Disk{{Name: "containerdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
					},
					Volumes: []v1.Volume{{Name: "containerdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{
						Image: envOr("CLUSTER_LANE_IMAGE", "quay.io/kubevirt/cirros-container-disk-demo:latest")}}}},
				},
			},
		},
	}
}

// kvLoop follows one VM on the cluster through watches, so that no
// status and no VMI is missed: a fail-fast VMI can be created, fail and be
// deleted within a few hundred milliseconds.
type kvLoop struct {
	name     string
	strategy v1.VirtualMachineRunStrategy
	// kc is the cluster's client; nil means the lane's.
	kc kubecli.KubevirtClient
	// pods, when set, follows the VM's launcher pods too, keeping each
	// one seen Failed: a fail-fast pod can be Failed for less than the
	// time between two polls before its VMI's deletion takes it.
	pods bool

	mu       sync.Mutex
	trace    cluster.Trace
	attempts map[types.UID]cluster.Attempt
	vm       *v1.VirtualMachine
	failed   []*k8sv1.Pod
	// failedFor is how long each Failed pod was seen before its deletion.
	failedFor map[types.UID]time.Duration
	failedAt  map[types.UID]time.Time
}

func (l *kvLoop) record(t watch.EventType, obj runtime.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch o := obj.(type) {
	case *v1.VirtualMachine:
		l.vm = o
		count := 0
		if o.Status.StartFailure != nil {
			count = o.Status.StartFailure.ConsecutiveFailCount
		}
		l.trace = l.trace.Add(cluster.Sample{At: time.Now(), Status: string(o.Status.PrintableStatus), Count: count})
	case *v1.VirtualMachineInstance:
		l.attempts[o.UID] = cluster.AttemptFrom(o)
	case *k8sv1.Pod:
		if !strings.HasPrefix(o.Name, "virt-launcher-"+l.name+"-") || o.Status.Phase != k8sv1.PodFailed {
			return
		}
		if at, seen := l.failedAt[o.UID]; seen {
			if t == watch.Deleted {
				l.failedFor[o.UID] = time.Since(at)
			}
			return
		}
		if l.failedAt == nil {
			l.failedAt, l.failedFor = map[types.UID]time.Time{}, map[types.UID]time.Duration{}
		}
		l.failedAt[o.UID] = time.Now()
		l.failed = append(l.failed, o)
	}
}

// failedWindows is, for each Failed pod already deleted, how long it was
// seen Failed before, first seen first.
func (l *kvLoop) failedWindows() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, p := range l.failed {
		if d, ok := l.failedFor[p.UID]; ok {
			ds = append(ds, d.Round(time.Millisecond))
		}
	}
	return ds
}

// failedPods are the VM's launcher pods seen Failed, first seen first
// (only with pods set).
func (l *kvLoop) failedPods() []*k8sv1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*k8sv1.Pod(nil), l.failed...)
}

// follow watches the VM and its VMIs (and pods, if set) until ctx ends, re-opening a watch
// that the server closes.
func (l *kvLoop) follow(ctx context.Context) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", l.name).String()}
	kc := l.kc
	if kc == nil {
		kc = client
	}
	watchers := []func() (watch.Interface, error){
		func() (watch.Interface, error) { return kc.VirtualMachine(namespace()).Watch(ctx, opts) },
		func() (watch.Interface, error) { return kc.VirtualMachineInstance(namespace()).Watch(ctx, opts) },
	}
	if l.pods {
		watchers = append(watchers, func() (watch.Interface, error) {
			return kc.CoreV1().Pods(namespace()).Watch(ctx, metav1.ListOptions{})
		})
	}
	for _, open := range watchers {
		go func() {
			for ctx.Err() == nil {
				w, err := open()
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				for ev := range w.ResultChan() {
					if ev.Type != watch.Error {
						l.record(ev.Type, ev.Object)
					}
				}
				w.Stop()
			}
		}()
	}
}

func (l *kvLoop) snapshot() (cluster.Trace, []cluster.Attempt, *v1.VirtualMachine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var as []cluster.Attempt
	for _, a := range l.attempts {
		as = append(as, a)
	}
	return append(cluster.Trace(nil), l.trace...), as, l.vm
}

// ourLoop is the same VM run by our virt-controller.
type ourLoop struct {
	name     string
	manifest string
}

func (o ourLoop) snapshot(p *ctlharness.Proc) (cluster.Trace, []cluster.Attempt) {
	evs := p.Events("", namespace()+"/"+o.name)
	return cluster.ControllerTrace(evs), cluster.ControllerAttempts(evs)
}

// createdBetween counts attempts created after from and before to, with
// one second of margin at the end for Kubernetes' whole-second timestamps.
func createdBetween(as []cluster.Attempt, from, to time.Time) int {
	n := 0
	for _, a := range as {
		if a.Created.After(from) && a.Created.Before(to.Add(-time.Second)) {
			n++
		}
	}
	return n
}

// gapTable prints the first n gaps of a run, one line each.
func gapTable(who string, gaps []cluster.Gap, n int) string {
	var b strings.Builder
	for i, g := range gaps {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "%-32s failure %d: waited %6.2fs, envelope %v..%v\n", who, g.Count, g.Observed.Seconds(), g.Low, g.High)
	}
	return b.String()
}

// createOnCluster creates vm on the cluster and, when the spec's container
// ends, deletes it and waits for its VMI to go.
func createOnCluster(ctx context.Context, vm *v1.VirtualMachine) {
	_, err := client.VirtualMachine(namespace()).Create(ctx, vm, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	name := vm.Name
	DeferCleanup(func() {
		bg := context.Background()
		_ = client.VirtualMachine(namespace()).Delete(bg, name, metav1.DeleteOptions{})
		Eventually(func() bool {
			_, err := client.VirtualMachineInstance(namespace()).Get(bg, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(BeTrue(), "VMI %s not gone after its VM was deleted", name)
	})
}

func writeVM(dir string, vm *v1.VirtualMachine) string {
	p := filepath.Join(dir, vm.Name+".yaml")
	m, err := testguest.Manifest(vm)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(p+".tmp", []byte(m), 0o644)).To(Succeed())
	Expect(os.Rename(p+".tmp", p)).To(Succeed())
	return p
}

var _ = Describe("crash loops on KubeVirt's own controller and on ours", Ordered, func() {
	const upTo = 3 // failure counts whose retry delay is checked
	var (
		ctx        context.Context
		cancel     context.CancelFunc
		kv         = map[v1.VirtualMachineRunStrategy]*kvLoop{}
		ours       = map[v1.VirtualMachineRunStrategy]ourLoop{}
		proc       *ctlharness.Proc
		work       string
		stoppedAt  time.Time
		strategies = []v1.VirtualMachineRunStrategy{v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure}
	)
	short := map[v1.VirtualMachineRunStrategy]string{v1.RunStrategyAlways: "always", v1.RunStrategyRerunOnFailure: "rerun"}

	BeforeAll(func() {
		ctx, cancel = context.WithCancel(context.Background())
		DeferCleanup(cancel)
		var err error
		work, err = os.MkdirTemp("", "cluster-lane-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, work)
		suffix := fmt.Sprintf("%d", time.Now().Unix()%100000)
		var manifests []string
		for _, s := range strategies {
			l := &kvLoop{name: "kv-" + short[s] + "-" + suffix, strategy: s, attempts: map[types.UID]cluster.Attempt{}}
			createOnCluster(ctx, crashingVM(l.name, s, lite != nil))
			kv[s] = l
			l.follow(ctx)
			o := ourLoop{name: "ours-" + short[s] + "-" + suffix}
			o.manifest = writeVM(work, crashingVM(o.name, s, true))
			ours[s] = o
			manifests = append(manifests, o.manifest)
		}
		proc = ctlharness.Start(bins, filepath.Join(work, "state"), work, int(time.Now().UnixNano()%1000), nil, manifests...)
	})

	It("loops with counts 1, 2, 3, shows CrashLoopBackOff, and waits inside KubeVirt's envelope on both controllers", func() {
		By("waiting for the fourth attempt of every VM (the retry after failure 3)")
		Eventually(func() string {
			var missing []string
			for _, s := range strategies {
				if _, as, _ := kv[s].snapshot(); len(as) < upTo+1 {
					missing = append(missing, fmt.Sprintf("%s: %d attempts", kv[s].name, len(as)))
				}
				if _, as := ours[s].snapshot(proc); len(as) < upTo+1 {
					missing = append(missing, fmt.Sprintf("%s: %d attempts", ours[s].name, len(as)))
				}
			}
			return strings.Join(missing, ", ")
		}).WithTimeout(6 * time.Minute).WithPolling(time.Second).Should(BeEmpty())

		var table strings.Builder
		for _, s := range strategies {
			kvTrace, kvAttempts, vm := kv[s].snapshot()
			ourTrace, ourAttempts := ours[s].snapshot(proc)
			kvGaps, ourGaps := cluster.Gaps(kvAttempts, 1), cluster.Gaps(ourAttempts, 1)
			table.WriteString(gapTable("KubeVirt "+string(s), kvGaps, upTo))
			table.WriteString(gapTable("ours "+string(s), ourGaps, upTo))
			Expect(len(kvGaps)).To(BeNumerically(">=", upTo), "KubeVirt %s gaps %+v", s, kvGaps)
			Expect(len(ourGaps)).To(BeNumerically(">=", upTo), "our %s gaps %+v", s, ourGaps)
			// Kubernetes timestamps have whole seconds: 2 s of slack for
			// KubeVirt's side; ours are exact to the nanosecond.
			Expect(cluster.CheckEnvelope(kvGaps[:upTo], 2*time.Second)).To(Succeed(), "KubeVirt %s", s)
			Expect(cluster.CheckEnvelope(ourGaps[:upTo], 500*time.Millisecond)).To(Succeed(), "ours %s", s)
			Expect(vm.Status.StartFailure).NotTo(BeNil())
			Expect(vm.Status.StartFailure.ConsecutiveFailCount).To(BeNumerically(">=", upTo))
			Expect(cluster.CompareLoops(kvTrace, ourTrace, "KubeVirt "+string(s), "ours "+string(s), upTo)).To(Succeed(),
				"KubeVirt trace %+v\nour trace %+v", kvTrace, ourTrace)
			fmt.Fprintf(GinkgoWriter, "KubeVirt %s statuses by count: %v / %v / %v; ours: %v / %v / %v\n", s,
				kvTrace.StatusesAt(1), kvTrace.StatusesAt(2), kvTrace.StatusesAt(3), ourTrace.StatusesAt(1), ourTrace.StatusesAt(2), ourTrace.StatusesAt(3))
		}
		fmt.Fprint(GinkgoWriter, table.String())
		Expect(os.WriteFile(filepath.Join(artifacts, "gaps.txt"), []byte(table.String()), 0o644)).To(Succeed())
	})

	It("stops in the middle of the loop and clears the record; KubeVirt refuses to stop RerunOnFailure, ours does not", func() {
		stoppedAt = time.Now()
		By("KubeVirt, Always: the stop subresource")
		Expect(client.VirtualMachine(namespace()).Stop(ctx, kv[v1.RunStrategyAlways].name, &v1.StopOptions{})).To(Succeed())

		By("KubeVirt, RerunOnFailure: the stop subresource while no VMI is live")
		// The first spec ends when the fourth attempt appears, and that VMI
		// may still be pending or scheduling; virt-api lets a stop through
		// while a VMI is live, so wait for it to fail and be removed (the
		// backoff after failure 4 then leaves well over a minute of no VMI).
		rerunName := kv[v1.RunStrategyRerunOnFailure].name
		Eventually(func() string {
			vmi, err := client.VirtualMachineInstance(namespace()).Get(ctx, rerunName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return ""
			case err != nil:
				return err.Error()
			case vmi.IsFinal():
				return ""
			}
			return fmt.Sprintf("VMI %s is %s", vmi.UID, vmi.Status.Phase)
		}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeEmpty(), "KubeVirt %s", rerunName)
		err := client.VirtualMachine(namespace()).Stop(ctx, kv[v1.RunStrategyRerunOnFailure].name, &v1.StopOptions{})
		fmt.Fprintf(GinkgoWriter, "KubeVirt stop of a RerunOnFailure VM in CrashLoopBackOff: %v\n", err)
		if lite != nil {
			// KubeVirt v1.6.0, pkg/virt-api/rest/lifecycle.go: for
			// RerunOnFailure and Manual, no VMI or a final one is a conflict.
			Expect(apierrors.IsConflict(err)).To(BeTrue(), "expected KubeVirt v1.6.0's 409, got %v", err)
			Expect(err.Error()).To(ContainSubstring("VM is not running"))
		}
		if err != nil {
			rerun := kv[v1.RunStrategyRerunOnFailure].name
			vms := client.VirtualMachine(namespace())
			By("KubeVirt, RerunOnFailure: runStrategy Halted, which virt-controller turns into Always")
			// The failed VMI is gone and a Start request waits in
			// status.stateChangeRequests for the backoff to expire; with
			// Halted, no VMI and a Start request pending, virt-controller
			// sets runStrategy: Always (pkg/virt-controller/watch/vm/vm.go,
			// case RunStrategyHalted) and the loop goes on.
			halt := []byte(`[{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]`)
			_, err = vms.Patch(ctx, rerun, types.JSONPatchType, halt, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
			flipped := Eventually(func() v1.VirtualMachineRunStrategy {
				vm, err := vms.Get(ctx, rerun, metav1.GetOptions{})
				if err != nil || vm.Spec.RunStrategy == nil {
					return ""
				}
				return *vm.Spec.RunStrategy
			}).WithTimeout(15 * time.Second).WithPolling(100 * time.Millisecond)
			if lite != nil {
				flipped.Should(Equal(v1.RunStrategyAlways), "KubeVirt v1.6.0 rewrites Halted to Always while a Start request is pending")
				_, _, vm := kv[v1.RunStrategyRerunOnFailure].snapshot()
				fmt.Fprintf(GinkgoWriter, "KubeVirt RerunOnFailure after runStrategy Halted: runStrategy %s, %s, startFailure count %d, stateChangeRequests %v\n",
					*vm.Spec.RunStrategy, vm.Status.PrintableStatus, vm.Status.StartFailure.ConsecutiveFailCount, vm.Status.StateChangeRequests)
			}

			By("KubeVirt, RerunOnFailure: what stops it: drop the pending Start request from the status, then Halted")
			drop := []byte(`[{"op":"remove","path":"/status/stateChangeRequests"}]`)
			_, err = vms.Patch(ctx, rerun, types.JSONPatchType, drop, metav1.PatchOptions{}, "status")
			Expect(err).NotTo(HaveOccurred())
			_, err = vms.Patch(ctx, rerun, types.JSONPatchType, halt, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
		}

		By("ours, both strategies: virt-controller stop")
		for _, s := range strategies {
			_, errs, code := ctlharness.CLI(bins.Controller, "stop", ours[s].name, "--state-dir", filepath.Join(work, "state"))
			Expect(code).To(Equal(0), "our stop of %s (%s): %s", ours[s].name, s, errs)
		}

		for _, s := range strategies {
			Eventually(func() string {
				_, _, vm := kv[s].snapshot()
				return fmt.Sprintf("%s startFailure=%v", vm.Status.PrintableStatus, vm.Status.StartFailure != nil)
			}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Stopped startFailure=false"), "KubeVirt %s", s)
			Eventually(func() string {
				st := ctlharness.Status(bins.Controller, filepath.Join(work, "state"), ours[s].name)
				return fmt.Sprintf("%s startFailure=%v", st.Status.PrintableStatus, st.Status.StartFailure != nil)
			}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Stopped startFailure=false"), "ours %s", s)
		}
	})

	It("recovers to Running with the record cleared once the fail-fast annotation is gone", func() {
		patch, err := cluster.RemoveTemplateAnnotationPatch(failFast)
		Expect(err).NotTo(HaveOccurred())
		startedAt := time.Now()
		for _, s := range strategies {
			_, err := client.VirtualMachine(namespace()).Patch(ctx, kv[s].name, types.JSONPatchType, patch, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(client.VirtualMachine(namespace()).Start(ctx, kv[v1.RunStrategyAlways].name, &v1.StartOptions{})).To(Succeed())
		back, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/runStrategy", "value": string(v1.RunStrategyRerunOnFailure)}})
		_, err = client.VirtualMachine(namespace()).Patch(ctx, kv[v1.RunStrategyRerunOnFailure].name, types.JSONPatchType, back, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())

		for _, s := range strategies {
			// The manifest is our controller's VM object: the same edits
			// as on the cluster. Always: annotation gone, runStrategy as
			// the stop left it (Halted), then start. RerunOnFailure:
			// annotation gone and runStrategy back, which starts it.
			strategy := s
			if s == v1.RunStrategyAlways {
				strategy = v1.RunStrategyHalted
			}
			vm := crashingVM(ours[s].name, strategy, true)
			delete(vm.Spec.Template.ObjectMeta.Annotations, failFast)
			writeVM(work, vm)
			Eventually(func() int { return len(proc.Events(controller.EventManifestChanged, namespace()+"/"+ours[s].name)) }).
				WithTimeout(30*time.Second).Should(BeNumerically(">=", 1), "our controller did not notice the edit of %s", ours[s].manifest)
			if s == v1.RunStrategyAlways {
				_, errs, code := ctlharness.CLI(bins.Controller, "start", ours[s].name, "--state-dir", filepath.Join(work, "state"))
				Expect(code).To(Equal(0), "our start of %s: %s", ours[s].name, errs)
			}
		}

		for _, s := range strategies {
			Eventually(func() string {
				_, _, vm := kv[s].snapshot()
				return fmt.Sprintf("%s startFailure=%v", vm.Status.PrintableStatus, vm.Status.StartFailure != nil)
			}).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Running startFailure=false"), "KubeVirt %s", s)
			Eventually(func() string {
				st := ctlharness.Status(bins.Controller, filepath.Join(work, "state"), ours[s].name)
				return fmt.Sprintf("%s startFailure=%v", st.Status.PrintableStatus, st.Status.StartFailure != nil)
			}).WithTimeout(3*time.Minute).WithPolling(200*time.Millisecond).Should(Equal("Running startFailure=false"), "ours %s", s)
		}

		if lite != nil && laneRuntime() == "podman" {
			By("KubeVirt's Running VMs run in podman containers of their launcher pods")
			for _, s := range strategies {
				vmi, err := client.VirtualMachineInstance(namespace()).Get(ctx, kv[s].name, metav1.GetOptions{})
				Expect(err).NotTo(HaveOccurred())
				pod := launcherPodOf(ctx, vmi)
				Expect(pod).NotTo(BeNil(), "the launcher pod of %s", kv[s].name)
				cs := containersOfPod(pod.UID)
				Expect(cs).To(HaveLen(1), "containers of pod %s", pod.Name)
				Expect([]string{cs[0].State.Status, cs[0].ImageName}).To(Equal([]string{"running", launcherImage}), "container of pod %s", pod.Name)
			}
		}

		By("no attempt was made between the stop and the start")
		for _, s := range strategies {
			_, kvAttempts, _ := kv[s].snapshot()
			_, ourAttempts := ours[s].snapshot(proc)
			Expect(createdBetween(kvAttempts, stoppedAt, startedAt)).To(BeZero(), "KubeVirt %s", s)
			Expect(createdBetween(ourAttempts, stoppedAt, startedAt)).To(BeZero(), "ours %s", s)
		}
	})
})
