package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// scenario is what the herd's guests do.
type scenario struct {
	// Storm: the guest boots, then panics FailAfter after it is ready (a
	// failure after Running); otherwise every launcher fails fast.
	Storm     bool
	FailAfter time.Duration
}

// vm is the herd's VM number i under runStrategy Always.
func (s scenario) vm(i int) *v1.VirtualMachine {
	ann := map[string]string{faults.FailFastAnnotation: "true"}
	if s.Storm {
		ann = map[string]string{"faults.crashloop.dev/guest-panic": "after=" + s.FailAfter.String()}
	}
	return testguest.VM(fmt.Sprintf("herd-%04d", i), v1.RunStrategyAlways, ann, "")
}

// result is what one controller did with one herd.
type result struct {
	Controller string
	VMs        int
	Duration   time.Duration
	// VMIs and Pods created in the run (ours: one launcher per VMI).
	VMIs, Pods int
	// Failures are counted start failures (plans), MaxCount the highest
	// consecutive count reached, Pending plans not yet due or retried.
	Failures, MaxCount, Pending int
	Retries                     []retry
	Lateness                    quantiles
	Spread                      spread
	CrashLoop                   bool
	// Rates are API requests per second by verb and resource (KubeVirt);
	// Requests and Writes their sums. Ours has no API server: Writes is
	// its state saves per second.
	Rates           []rate
	Requests        float64
	Writes          float64
	EtcdGrowthBytes float64
	CPU             []cpuDelta
	// ClockSteps are the wall clock's jumps against the monotonic clock
	// during the run (the machine paused); lateness includes them.
	ClockSteps []time.Duration
}

// finish derives the summary fields from the retries.
func (r *result) finish(start, end time.Time) {
	r.Lateness = quantilesOf(lateness(r.Retries))
	r.Spread = spreadOf(retryTimes(r.Retries), start, end, 10*time.Second)
}

// bins are the programs the bench runs.
type bins struct {
	clusterlite, controller, launcher, imageDir, liteBinDir string
	// launcherRuntime is cluster-lite's --launcher-runtime.
	launcherRuntime string
}

// runKubeVirt brings up cluster-lite, creates the herd, lets KubeVirt's
// virt-controller run it for d, measures, and tears the stack down.
func runKubeVirt(ctx context.Context, log *slog.Logger, b bins, work string, sc scenario, n int, d time.Duration) (r result, err error) {
	r = result{Controller: "kubevirt", VMs: n, Duration: d}
	l, err := startLite(ctx, b, work)
	if err != nil {
		return r, err
	}
	defer func() {
		if serr := l.stop(); err == nil {
			err = serr
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return r, fmt.Errorf("reading %s: %w", l.kubeconfig, err)
	}
	// The herd is created at once: client-go's default 5 requests/s
	// would spread 50 creations over 8 s.
	cfg.QPS, cfg.Burst = 1000, 1000
	kv, err := kubecli.GetKubevirtClientFromRESTConfig(cfg)
	if err != nil {
		return r, fmt.Errorf("client for %s: %w", l.kubeconfig, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs, err := watchKubeVirt(wctx, kv, metav1.NamespaceDefault)
	if err != nil {
		return r, err
	}
	comps := append(componentsOf(l.pids()), component{Name: "herd (this observer)", PID: os.Getpid()})
	before, err := scrape(ctx, kv, l)
	if err != nil {
		return r, err
	}
	cpu0 := sampleCPU(comps)
	clock := watchClock()
	start := time.Now()
	if err := createVMs(ctx, kv, sc, n); err != nil {
		return r, err
	}
	log.Info("herd created", "controller", "kubevirt", "vms", n, "after", time.Since(start).Round(time.Millisecond))
	if err := sleepCtx(ctx, d-time.Since(start)); err != nil {
		return r, err
	}
	end := time.Now()
	r.ClockSteps = clock.close()
	cpu1 := sampleCPU(comps)
	after, err := scrape(ctx, kv, l)
	if err != nil {
		return r, err
	}
	r.CPU = diffCPU(comps, cpu0, cpu1)
	secs := end.Sub(start).Seconds()
	r.Rates = requestRates(before.requests, after.requests, secs)
	r.Requests, r.Writes = totals(r.Rates)
	r.EtcdGrowthBytes = after.etcdDB - before.etcdDB
	r.Retries, r.Pending, r.Failures, r.MaxCount = obs.retries(end)
	r.VMIs, r.Pods, r.CrashLoop = obs.counts(start, end)
	r.finish(start, end)
	return r, nil
}

// snapshot is the metrics read at one moment.
type snapshot struct {
	requests map[string]float64
	etcdDB   float64
}

// scrape reads the API server's request counters (through the host's
// forward) and etcd's database size (inside the namespace).
func scrape(ctx context.Context, kv kubecli.KubevirtClient, l *lite) (snapshot, error) {
	raw, err := kv.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return snapshot{}, fmt.Errorf("API server /metrics: %w", err)
	}
	ss, err := parseMetrics(string(raw), "apiserver_request_total")
	if err != nil {
		return snapshot{}, fmt.Errorf("API server /metrics: %w", err)
	}
	db, err := l.etcdDBSize(ctx)
	if err != nil {
		return snapshot{}, err
	}
	return snapshot{requests: requestCounts(ss), etcdDB: db}, nil
}

// createVMs creates the herd, a few at a time.
func createVMs(ctx context.Context, kv kubecli.KubevirtClient, sc scenario, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := kv.VirtualMachine(metav1.NamespaceDefault).Create(ctx, sc.vm(i), metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("creating VM %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// workDir makes a fresh folder for one run.
func workDir(parent, name string) (string, error) {
	d := filepath.Join(parent, name)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.MkdirAll(d, 0o755)
}
