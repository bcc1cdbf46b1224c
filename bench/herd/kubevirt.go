package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
)

// kvObserver records, from watches, what KubeVirt's controller did to
// the herd: every VMI as it appeared, every retry plan the VMs'
// status.startFailure announced, pods created, and whether any VM showed
// CrashLoopBackOff.
type kvObserver struct {
	mu sync.Mutex
	// vmis are each VM's VMIs in the order they appeared.
	vmis map[string][]seenVMI
	// plans are each VM's retry plans by the failed VMI's UID.
	plans     map[string]map[string]plan
	pods      map[string]time.Time
	crashLoop bool
}

// seenVMI is a VMI and when the watch delivered it.
type seenVMI struct {
	UID  string
	Seen time.Time
}

// plan is a retry KubeVirt announced: the count after the failure and
// retryAfterTimestamp.
type plan struct {
	Count int
	At    time.Time
}

// newKVObserver returns an observer with nothing seen yet.
func newKVObserver() *kvObserver {
	return &kvObserver{vmis: map[string][]seenVMI{}, plans: map[string]map[string]plan{}, pods: map[string]time.Time{}}
}

// vm records a VM's retry plan (once per failed VMI) and its printable status.
func (o *kvObserver) vm(obj any) {
	vm, ok := obj.(*v1.VirtualMachine)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if vm.Status.PrintableStatus == v1.VirtualMachineStatusCrashLoopBackOff {
		o.crashLoop = true
	}
	sf := vm.Status.StartFailure
	if sf == nil || sf.RetryAfterTimestamp == nil || sf.LastFailedVMIUID == "" {
		return
	}
	ps := o.plans[vm.Name]
	if ps == nil {
		ps = map[string]plan{}
		o.plans[vm.Name] = ps
	}
	if _, seen := ps[string(sf.LastFailedVMIUID)]; !seen {
		ps[string(sf.LastFailedVMIUID)] = plan{Count: sf.ConsecutiveFailCount, At: sf.RetryAfterTimestamp.Time}
	}
}

// vmi records a VMI the first time it is seen.
func (o *kvObserver) vmi(obj any) {
	vmi, ok := obj.(*v1.VirtualMachineInstance)
	if !ok {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.vmis[vmi.Name] { // a VMI has its VM's name
		if s.UID == string(vmi.UID) {
			return
		}
	}
	o.vmis[vmi.Name] = append(o.vmis[vmi.Name], seenVMI{UID: string(vmi.UID), Seen: now})
}

// pod records a pod the first time it is seen.
func (o *kvObserver) pod(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		o.mu.Lock()
		if _, seen := o.pods[string(p.UID)]; !seen {
			o.pods[string(p.UID)] = time.Now()
		}
		o.mu.Unlock()
	}
}

// watchKubeVirt starts the three informers in namespace ns and waits for
// their first list.
func watchKubeVirt(ctx context.Context, kv kubecli.KubevirtClient, ns string) (*kvObserver, error) {
	o := newKVObserver()
	add := func(f func(any)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, n any) { f(n) }}
	}
	infs := []cache.SharedIndexInformer{
		cache.NewSharedIndexInformer(&cache.ListWatch{
			ListFunc:  func(lo metav1.ListOptions) (runtime.Object, error) { return kv.VirtualMachine(ns).List(ctx, lo) },
			WatchFunc: func(lo metav1.ListOptions) (watch.Interface, error) { return kv.VirtualMachine(ns).Watch(ctx, lo) },
		}, &v1.VirtualMachine{}, 0, cache.Indexers{}),
		cache.NewSharedIndexInformer(&cache.ListWatch{
			ListFunc: func(lo metav1.ListOptions) (runtime.Object, error) {
				return kv.VirtualMachineInstance(ns).List(ctx, lo)
			},
			WatchFunc: func(lo metav1.ListOptions) (watch.Interface, error) {
				return kv.VirtualMachineInstance(ns).Watch(ctx, lo)
			},
		}, &v1.VirtualMachineInstance{}, 0, cache.Indexers{}),
		cache.NewSharedIndexInformer(&cache.ListWatch{
			ListFunc:  func(lo metav1.ListOptions) (runtime.Object, error) { return kv.CoreV1().Pods(ns).List(ctx, lo) },
			WatchFunc: func(lo metav1.ListOptions) (watch.Interface, error) { return kv.CoreV1().Pods(ns).Watch(ctx, lo) },
		}, &corev1.Pod{}, 0, cache.Indexers{}),
	}
	synced := make([]cache.InformerSynced, 0, len(infs))
	for i, f := range []func(any){o.vm, o.vmi, o.pod} {
		if _, err := infs[i].AddEventHandler(add(f)); err != nil {
			return nil, fmt.Errorf("watching: %w", err)
		}
		go infs[i].Run(ctx.Done())
		synced = append(synced, infs[i].HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("watches did not sync: %w", ctx.Err())
	}
	return o, nil
}

// retries pairs each plan with the next VMI of its VM (the retry);
// retries after end are left out, and so are plans still waiting, which
// are counted in pending.
func (o *kvObserver) retries(end time.Time) (rs []retry, pending, failures, maxCount int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for vm, ps := range o.plans {
		seen := o.vmis[vm]
		for uid, p := range ps {
			failures++
			maxCount = max(maxCount, p.Count)
			i := indexOf(seen, uid)
			if i < 0 || i+1 >= len(seen) || seen[i+1].Seen.After(end) {
				pending++
				continue
			}
			rs = append(rs, retry{VM: vm, Count: p.Count, Planned: p.At, Actual: seen[i+1].Seen})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Actual.Before(rs[j].Actual) })
	return rs, pending, failures, maxCount
}

// indexOf is the position of the VMI uid in s, or -1.
func indexOf(s []seenVMI, uid string) int {
	for i, v := range s {
		if v.UID == uid {
			return i
		}
	}
	return -1
}

// counts are the VMIs and pods seen between start and end.
func (o *kvObserver) counts(start, end time.Time) (vmis, pods int, crashLoop bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	in := func(t time.Time) bool { return !t.Before(start) && !t.After(end) }
	for _, s := range o.vmis {
		for _, v := range s {
			if in(v.Seen) {
				vmis++
			}
		}
	}
	for _, t := range o.pods {
		if in(t) {
			pods++
		}
	}
	return vmis, pods, o.crashLoop
}
