// Package nodeagent plays kubelet and virt-handler for the one node of a
// cluster-lite KubeVirt. KubeVirt's own virt-controller creates a
// virt-launcher pod for every VMI; the agent binds the pod to its node
// (there is no scheduler), starts our virt-launcher for the pod's VMI with
// the arguments KubeVirt put on the pod that matter here (--simulate-crash,
// --qemu-timeout, --grace-period-seconds), and reports what happens the way
// kubelet reports pod status and virt-handler reports VMI status: pod
// phases and container states with exit codes, VMI phases Running,
// Succeeded and Failed with their phaseTransitionTimestamps, and the final
// deletion of a terminated pod. It keeps the node's virt-handler heartbeat
// fresh, so KubeVirt's node controller does not fail its VMIs.
//
// In KubeVirt mode (Config.KubeVirt) the pod's compute container runs its
// own command line with the pod's emptyDirs instead, and kubevirtmode's
// virt-handler-driver beside it drives it over KubeVirt's gRPC protocol
// and writes the event lines the agent follows.
//
// As in KubeVirt, a VMI's domain is started only once virt-controller has
// handed the VMI over (phase Scheduled); a launcher told to simulate a
// crash dies as soon as its container starts, before that.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// Config says which node the agent plays and how it runs launchers.
type Config struct {
	// Client talks to the cluster as the agent's kubelet part (and, without
	// Kubelet, as virt-handler): the pods bound to NodeName, their status,
	// the node and, without Kubelet, VMIs.
	Client kubecli.KubevirtClient
	// Scheduler binds launcher pods to NodeName, the scheduler's part: it
	// lists the pods no node has yet, which a kubelet may not. Nil means
	// Client.
	Scheduler kubernetes.Interface
	// NodeName is the node to register and serve.
	NodeName string
	// LauncherPath is our virt-launcher binary.
	LauncherPath string
	// LauncherArgs are passed to every launcher before the manifest
	// (for example --image-dir, --log-level).
	LauncherArgs []string
	// ReadOnlyMounts are host folders the launchers read (the guest
	// images), mounted read-only at the same paths into containers.
	ReadOnlyMounts []string
	// Runtime runs the compute containers; nil means bare processes
	// (launchrt.Process).
	Runtime Runtime
	// KubeVirt, when set, runs launcher pods in KubeVirt mode (the pod's
	// own command line and volumes, a driver beside it); it needs the
	// Podman runtime. Nil runs our virt-launcher directly.
	KubeVirt *KubeVirtMode
	// Kubelet, when set, is the node side with KubeVirt's own
	// virt-handler: the agent keeps only kubelet's role (KubeletMode).
	Kubelet *KubeletMode
	// WorkDir holds one folder per pod: the VMI manifest, the launcher's
	// events, log and console.
	WorkDir string
	// HeartbeatInterval is how often the node's virt-handler heartbeat is
	// renewed (default 30 s; KubeVirt's node controller gives up after 5 min).
	HeartbeatInterval time.Duration
	// Logger receives structured logs.
	Logger *slog.Logger
}

// Sync workers: the agent playing virt-handler keeps a start short (one
// spawn), so two suffice; as kubelet, a pod's start is several `podman
// run` in turn and holds its worker for seconds, and kubelet runs a
// worker per pod, so that a burst of starts does not hold back the
// other pods' starts and status reports.
const (
	DefaultWorkers = 2
	KubeletWorkers = 16
)

// Agent is a running node agent.
type Agent struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]
	// pods are the launcher pods bound to the node (kubelet's view),
	// unbound those bound to none (the scheduler's), vmis the VMIs (only
	// as virt-handler: nil in kubelet-only mode, which never reads them).
	pods    cache.SharedIndexInformer
	unbound cache.SharedIndexInformer
	vmis    cache.SharedIndexInformer

	// spawner starts launchers so that they die with the agent.
	spawner *spawn.Spawner
	// runtime runs the compute containers, procs the KubeVirt-mode
	// drivers (bare processes that die with the agent).
	runtime Runtime
	procs   Runtime

	mu         sync.Mutex
	containers map[types.UID]*container // by pod UID
	byVMI      map[types.UID]*container // by VMI UID
}

// Key prefixes of the work queue.
const (
	podPrefix  = "pod/"
	vmiPrefix  = "vmi/"
	bindPrefix = "bind/"
)

// launcherPodSelector selects the pods KubeVirt creates for VMIs.
const launcherPodSelector = v1.AppLabel + "=virt-launcher"

// New checks cfg and prepares an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("node agent: Config.Client is nil")
	case cfg.NodeName == "":
		return nil, errors.New("node agent: Config.NodeName is empty")
	case cfg.LauncherPath == "":
		return nil, errors.New("node agent: Config.LauncherPath is empty")
	case cfg.WorkDir == "":
		return nil, errors.New("node agent: Config.WorkDir is empty")
	}
	if cfg.KubeVirt != nil {
		if _, ok := cfg.Runtime.(*Podman); !ok {
			return nil, errors.New("node agent: KubeVirt mode runs launcher pods as containers: Config.Runtime must be Podman")
		}
		if cfg.KubeVirt.Driver == "" || cfg.KubeVirt.ImageDir == "" {
			return nil, errors.New("node agent: KubeVirt mode needs the driver binary and the image folder")
		}
	}
	if cfg.Scheduler == nil {
		cfg.Scheduler = cfg.Client
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("component", "node-agent", "node", cfg.NodeName)
	return &Agent{cfg: cfg, containers: map[types.UID]*container{}, byVMI: map[types.UID]*container{}}, nil
}

// Run registers the node and serves it until ctx ends; then it stops every
// launcher it started (SIGTERM, then SIGKILL after their grace period) and
// returns.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.registerNode(ctx); err != nil {
		return err
	}
	a.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer a.queue.ShutDown()
	a.spawner = spawn.New()
	// Closed after shutdown has stopped every launcher (defers run last
	// in first out).
	defer a.spawner.Close()
	a.procs = launchrt.Process{Spawner: a.spawner, Logger: a.cfg.Logger}
	a.runtime = a.cfg.Runtime
	if a.runtime == nil {
		a.runtime = a.procs
	}

	if err := a.watch(ctx); err != nil {
		return err
	}
	synced := []cache.InformerSynced{a.pods.HasSynced, a.unbound.HasSynced}
	if a.vmis != nil {
		synced = append(synced, a.vmis.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		// ctx ended before the caches filled: a stop right after the
		// stack is ready (the node registered) is an ordinary end.
		return a.shutdown(nil)
	}
	a.cfg.Logger.Info("node agent ready", "runtime", a.runtime.Name(), "kubevirtMode", a.cfg.KubeVirt != nil, "kubeletOnly", a.cfg.Kubelet != nil)
	if a.cfg.Kubelet != nil {
		go a.nodeStatus(ctx)
	} else {
		go a.heartbeat(ctx)
	}
	workers := DefaultWorkers
	if a.cfg.Kubelet != nil {
		workers = KubeletWorkers
	}
	for i := 0; i < workers; i++ {
		go a.work(ctx)
	}
	<-ctx.Done()
	return a.shutdown(nil)
}

// Field selectors of the two pod watches: a kubelet may list and watch
// only the pods bound to its node (the Node authorizer refuses any other
// list), the scheduler the pods bound to none.
func boundTo(node string) string { return fields.OneTermEqualSelector("spec.nodeName", node).String() }

const unboundPods = "spec.nodeName="

// watch starts the informers: the node's launcher pods through Client,
// the unbound ones through Scheduler, and the VMIs only as virt-handler.
func (a *Agent) watch(ctx context.Context) error {
	informer := func(client kubernetes.Interface, selector string) cache.SharedIndexInformer {
		return informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector, o.FieldSelector = launcherPodSelector, selector
		})).Core().V1().Pods().Informer()
	}
	a.pods = informer(a.cfg.Client, boundTo(a.cfg.NodeName))
	a.unbound = informer(a.cfg.Scheduler, unboundPods)
	if _, err := a.pods.AddEventHandler(a.handler(podPrefix)); err != nil {
		return fmt.Errorf("node agent: watching pods: %w", err)
	}
	if _, err := a.unbound.AddEventHandler(a.handler(bindPrefix)); err != nil {
		return fmt.Errorf("node agent: watching unbound pods: %w", err)
	}
	go a.pods.Run(ctx.Done())
	go a.unbound.Run(ctx.Done())
	if a.cfg.Kubelet != nil {
		return nil // VMIs are virt-handler's; a kubelet never reads them
	}
	a.vmis = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return a.cfg.Client.VirtualMachineInstance(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return a.cfg.Client.VirtualMachineInstance(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &v1.VirtualMachineInstance{}, 0, cache.Indexers{})
	if _, err := a.vmis.AddEventHandler(a.handler(vmiPrefix)); err != nil {
		return fmt.Errorf("node agent: watching VMIs: %w", err)
	}
	go a.vmis.Run(ctx.Done())
	return nil
}

// handler enqueues the key of every added, changed or deleted object.
func (a *Agent) handler(prefix string) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(prefix + key)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
}

func (a *Agent) work(ctx context.Context) {
	for {
		key, quit := a.queue.Get()
		if quit {
			return
		}
		var err error
		switch {
		case len(key) > len(podPrefix) && key[:len(podPrefix)] == podPrefix:
			err = a.syncPod(ctx, key[len(podPrefix):])
		case len(key) > len(vmiPrefix) && key[:len(vmiPrefix)] == vmiPrefix:
			err = a.syncVMI(ctx, key[len(vmiPrefix):])
		case len(key) > len(bindPrefix) && key[:len(bindPrefix)] == bindPrefix:
			err = a.syncBind(ctx, key[len(bindPrefix):])
		}
		if err != nil && ctx.Err() == nil {
			// A conflict is routine (virt-controller patches the same
			// pods and VMIs); the retry reads the new version.
			level := slog.LevelWarn
			if apierrors.IsConflict(err) {
				level = slog.LevelDebug
			}
			a.cfg.Logger.Log(ctx, level, "sync failed, will retry", "key", key, "err", err)
			a.queue.AddRateLimited(key)
		} else {
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// notifier returns a function that re-queues the pod and (as
// virt-handler) the VMI of c.
func (a *Agent) notifier(c *container) func() {
	return func() {
		a.queue.Add(podPrefix + c.podKey.String())
		if a.vmis != nil {
			a.queue.Add(vmiPrefix + c.vmiKey.String())
		}
	}
}

// shutdown stops every launcher and waits for them (bounded).
func (a *Agent) shutdown(cause error) error {
	a.mu.Lock()
	var all []*container
	for _, c := range a.containers {
		all = append(all, c)
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range all {
		c.stop(a.cfg.Logger, graceOr(c.args.GracePeriod, 30*time.Second))
	}
	var errs []error
	if cause != nil {
		errs = append(errs, cause)
	}
	for _, c := range all {
		if err := c.wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("launcher of %s did not end: %w", c.vmiKey, err))
		}
	}
	a.cfg.Logger.Info("node agent stopped", "launchers", len(all))
	return errors.Join(errs...)
}

func graceOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d + 5*time.Second
}

// registerNode creates or refreshes the Node object: schedulable for
// KubeVirt, Ready, with a fresh virt-handler heartbeat.
func (a *Agent) registerNode(ctx context.Context) error {
	nodes := a.cfg.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &k8sv1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("node agent: registering node %s: %w", a.cfg.NodeName, err)
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	labels := map[string]string{"kubernetes.io/hostname": a.cfg.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	if a.cfg.Kubelet == nil {
		// virt-handler's part: schedulable, and its node labeller
		// advertises the machine types that launcher pods select.
		labels[v1.NodeSchedulable] = "true"
		labels[v1.SupportedMachineTypeLabel+"q35"] = "true"
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[v1.VirtHandlerHeartbeat] = heartbeatStamp(time.Now())
	}
	for k, v := range labels {
		node.Labels[k] = v
	}
	if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node agent: labelling node %s: %w", a.cfg.NodeName, err)
	}
	capacity := a.capacity()
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []k8sv1.NodeAddress{{Type: k8sv1.NodeHostName, Address: a.cfg.NodeName}, {Type: k8sv1.NodeInternalIP, Address: "127.0.0.1"}}
	now := metav1.Now()
	node.Status.Conditions = []k8sv1.NodeCondition{{Type: k8sv1.NodeReady, Status: k8sv1.ConditionTrue, Reason: "KubeletReady",
		Message: "crashloop node agent is serving this node", LastHeartbeatTime: now, LastTransitionTime: now}}
	node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = "linux", "amd64"
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node agent: reporting status of node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// heartbeatStamp formats a time the way virt-handler writes its heartbeat
// annotation (a metav1.Time in JSON, without the quotes).
func heartbeatStamp(t time.Time) string {
	b, _ := metav1.NewTime(t).MarshalJSON()
	return string(b[1 : len(b)-1])
}

func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.VirtHandlerHeartbeat, heartbeatStamp(time.Now()))
			if _, err := a.cfg.Client.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// vmiRef is the VMI that owns pod, by its controller reference: all a
// kubelet knows of it.
func vmiRef(pod *k8sv1.Pod) (types.NamespacedName, types.UID, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "VirtualMachineInstance" {
		return types.NamespacedName{}, "", fmt.Errorf("pod %s/%s has no VirtualMachineInstance controller reference", pod.Namespace, pod.Name)
	}
	return types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, ref.UID, nil
}

// vmiOf returns the VMI key with UID uid, pod's owner, from the cache or
// the API: virt-handler's part, which the agent plays only without
// Kubelet.
func (a *Agent) vmiOf(ctx context.Context, pod *k8sv1.Pod, key types.NamespacedName, uid types.UID) (*v1.VirtualMachineInstance, error) {
	if obj, ok, _ := a.vmis.GetStore().GetByKey(key.String()); ok {
		if vmi := obj.(*v1.VirtualMachineInstance); vmi.UID == uid {
			return vmi, nil
		}
	}
	vmi, err := a.cfg.Client.VirtualMachineInstance(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting VMI of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if vmi.UID != uid {
		return nil, fmt.Errorf("pod %s/%s belongs to VMI UID %s, the VMI %s now has UID %s", pod.Namespace, pod.Name, uid, key.Name, vmi.UID)
	}
	return vmi, nil
}

// launch starts the compute container of c for vmi, in KubeVirt mode
// when c has the pod's layout.
func (a *Agent) launch(ctx context.Context, c *container, vmi *v1.VirtualMachineInstance) error {
	if c.layout != nil {
		return c.launchKubeVirt(ctx, &a.cfg, a.runtime, a.procs, vmi, a.notifier(c))
	}
	return c.launch(ctx, &a.cfg, a.runtime, vmi, a.notifier(c))
}

// newContainer records the compute container of a pod bound to this node.
func (a *Agent) newContainer(pod *k8sv1.Pod, vmiKey types.NamespacedName, vmiUID types.UID, args launchArgs, image string, res launchrt.Resources, layout *podLayout) *container {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.containers[pod.UID]; ok {
		return c
	}
	c := &container{
		podKey: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, podUID: pod.UID,
		vmiKey: vmiKey, vmiUID: vmiUID,
		args: args, image: image, res: res, layout: layout, pod: pod.DeepCopy(), dir: launcherapi.Dir(filepath.Join(a.cfg.WorkDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))),
		startedAt: time.Now(), done: make(chan struct{}),
	}
	if a.cfg.Kubelet != nil {
		c.states = newPodStates()
	}
	a.containers[pod.UID] = c
	a.byVMI[vmiUID] = c
	return c
}

func (a *Agent) containerOfPod(uid types.UID) *container {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.containers[uid]
}

func (a *Agent) containerOfVMI(uid types.UID) *container {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byVMI[uid]
}

// forget drops a container whose pod is gone from the cluster.
func (a *Agent) forget(c *container) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.containers, c.podUID)
	if a.byVMI[c.vmiUID] == c {
		delete(a.byVMI, c.vmiUID)
	}
}
