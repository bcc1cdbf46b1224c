package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

// Config configures a Controller. Durations are unscaled: the policy's
// scale applies to the backoff, the QEMU timeout and the grace period.
type Config struct {
	// StateDir is the state folder (see Store).
	StateDir string
	// Fsync makes each state save durable across a machine crash.
	Fsync bool
	// Launcher says how to run virt-launcher.
	Launcher LauncherOptions
	// Policy is the crash-loop policy; its Scale is the --time-scale.
	Policy backoff.Policy
	// Seed seeds every random draw (backoff jitter, QEMU timeout jitter,
	// launcher seeds).
	Seed launcherapi.Seed
	// StartTimeout is KubeVirt's QEMU start timeout, drawn once per launch
	// from the VM's random source and then scaled; the launcher gets it
	// without further jitter. Zero means launcherapi.DefaultStartTimeout.
	StartTimeout launcherapi.StartTimeout
	// KillMargin is added to a VMI's (scaled) grace period before a
	// launcher that ignores SIGTERM is killed; zero means 10 s.
	KillMargin time.Duration
	// WatchInterval is how often manifest files are checked for changes;
	// zero means 250 ms.
	WatchInterval time.Duration
	// StopOnExit stops live VMIs when the controller is shut down (not when
	// it is killed); otherwise they are left running and adopted next time.
	StopOnExit bool
	// Runtime runs the launchers; nil means bare processes that outlive
	// the controller (launchrt.Process), adopted again after a restart.
	Runtime launchrt.Runtime
	// Clock is the time source; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Observer receives one Event per state change; may be nil.
	Observer Observer
	// Expander expands the instancetypes and preferences VMs name when a
	// changed manifest file is read again (ReadManifests takes its own).
	Expander vmexpandexec.Expander
}

// Controller reconciles a set of VirtualMachines by run strategy, one
// virt-launcher process per VMI, with the crash-loop backoff of
// pkg/backoff, and persists their status in a state folder.
type Controller struct {
	cfg   Config
	clock clock.WithTicker
	log   *slog.Logger
	store *Store
	rt    launchrt.Runtime

	mu      sync.RWMutex
	workers map[Key]*worker
}

// New checks cfg and opens the state folder; it starts nothing.
func New(cfg Config) (*Controller, error) {
	if cfg.StartTimeout == (launcherapi.StartTimeout{}) {
		cfg.StartTimeout = launcherapi.DefaultStartTimeout
	}
	if cfg.KillMargin <= 0 {
		cfg.KillMargin = 10 * time.Second
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = 250 * time.Millisecond
	}
	if err := cfg.StartTimeout.Validate(); err != nil {
		return nil, fmt.Errorf("QEMU start timeout: %w", err)
	}
	if cfg.Policy.Scale < 0 {
		return nil, fmt.Errorf("time scale %g: must be positive", cfg.Policy.Scale)
	}
	if st, err := os.Stat(cfg.Launcher.Path); err != nil {
		return nil, fmt.Errorf("virt-launcher binary: %w", err)
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("virt-launcher binary %s: not an executable file", cfg.Launcher.Path)
	}
	c := &Controller{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, workers: map[Key]*worker{}}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.rt = cfg.Runtime
	if c.rt == nil {
		c.rt = launchrt.Process{Clock: c.clock, Poll: cfg.Launcher.poll()}
	}
	store, err := OpenStore(cfg.StateDir, cfg.Fsync)
	if err != nil {
		return nil, err
	}
	c.store = store
	return c, nil
}

func (c *Controller) timeScale() float64 {
	if c.cfg.Policy.Scale <= 0 {
		return 1
	}
	return c.cfg.Policy.Scale
}

// Run manages the VMs of manifests until ctx ends. It takes the state
// folder's lock, loads each VM's saved status (refusing to start at all if
// one cannot be read, so nothing is lost), listens on the control socket,
// watches the manifest files and runs one worker per VM.
func (c *Controller) Run(ctx context.Context, manifests []Manifest) error {
	unlock, err := c.store.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	for _, m := range manifests {
		rec, err := c.initialRecord(m)
		if err != nil {
			return err
		}
		c.workers[KeyOf(rec.VM)] = newWorker(c, rec)
	}
	ln, err := c.listen()
	if err != nil {
		return err
	}
	defer os.Remove(c.store.SocketPath())
	// The manifest files are looked at, and the watch's ticker exists,
	// before the start is reported: a file changed after ControllerStarted
	// is always seen to change.
	files := manifestFiles(manifests)
	tick := c.clock.NewTicker(c.cfg.WatchInterval)
	defer tick.Stop()
	if c.cfg.Observer != nil {
		c.cfg.Observer.Observe(Event{
			Time: c.clock.Now(), Event: EventControllerStarted, TimeScale: c.timeScale(), Seed: c.cfg.Seed,
			Policy: c.cfg.Policy.String(), StateDir: c.store.Dir(),
			Message: fmt.Sprintf("%d VMs, pid %d", len(c.workers), os.Getpid()),
		})
	}
	c.log.Info("controller started", "vms", len(c.workers), "seed", c.cfg.Seed, "timeScale", c.timeScale(), "state", c.store.Dir())

	var wg sync.WaitGroup
	for _, w := range c.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	var srvWG sync.WaitGroup
	srvWG.Add(2)
	go func() { defer srvWG.Done(); c.serve(srvCtx, ln) }()
	go func() { defer srvWG.Done(); c.watchManifests(srvCtx, tick, files) }()
	<-ctx.Done()
	wg.Wait()
	stopSrv()
	_ = ln.Close()
	srvWG.Wait()
	c.log.Info("controller stopped")
	return nil
}

// initialRecord loads m's saved record or makes a new one. A saved record
// whose manifest changed since takes the new spec and keeps its status.
func (c *Controller) initialRecord(m Manifest) (*Record, error) {
	k := KeyOf(m.VM)
	rec, err := c.store.Load(k)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		vm := m.VM.DeepCopy()
		vm.UID = types.UID(uuid.NewString())
		vm.Generation = 1
		vm.CreationTimestamp = metav1.NewTime(c.clock.Now())
		return &Record{VM: vm, Template: m.Template.DeepCopy(), ManifestDigest: m.Digest}, nil
	}
	if rec.ManifestDigest != m.Digest {
		vm := m.VM.DeepCopy()
		vm.Status = rec.VM.Status
		vm.UID, vm.CreationTimestamp, vm.Generation = rec.VM.UID, rec.VM.CreationTimestamp, rec.VM.Generation+1
		rec.VM, rec.Template, rec.ManifestDigest = vm, m.Template.DeepCopy(), m.Digest
	}
	return rec, nil
}

func (c *Controller) listen() (net.Listener, error) {
	path := c.store.SocketPath()
	if len(path) >= 108 {
		return nil, fmt.Errorf("control socket path %s is %d bytes, longer than a unix socket allows (107); use a shorter --state-dir", path, len(path))
	}
	// We hold the lock, so a socket file left here is from a dead controller.
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Only the controller's user drives it, whatever the umask.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

func (c *Controller) worker(k Key) (*worker, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if w, ok := c.workers[k]; ok {
		return w, nil
	}
	return nil, fmt.Errorf("%w: %s is not managed by this controller (known: %s)", errNotFound, k, c.knownNames(8))
}

func (c *Controller) knownNames(limit int) string {
	var names []string
	for k := range c.workers {
		names = append(names, k.String())
	}
	sort.Strings(names)
	if len(names) > limit {
		names = append(names[:limit], fmt.Sprintf("and %d more", len(names)-limit))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Snapshots returns the current state of every VM, sorted by key.
func (c *Controller) Snapshots() []*Snapshot {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Snapshot, 0, len(c.workers))
	for _, w := range c.workers {
		out = append(out, w.snap.Load())
	}
	sort.Slice(out, func(i, j int) bool { return KeyOf(out[i].VM).String() < KeyOf(out[j].VM).String() })
	return out
}

// Do sends op ("stop", "start" or "restart") to VM k and waits for the
// result, which reflects the state after the operation was applied and
// persisted.
func (c *Controller) Do(ctx context.Context, op string, k Key) (*Snapshot, string, error) {
	switch op {
	case opStop, opStart, opRestart:
	default:
		return nil, "", fmt.Errorf("unknown operation %q: allowed values are stop, start, restart, status", op)
	}
	w, err := c.worker(k)
	if err != nil {
		return nil, "", err
	}
	reply := make(chan commandResult, 1)
	select {
	case w.cmds <- command{op: op, reply: reply}:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	select {
	case r := <-reply:
		return r.snap, r.msg, r.err
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// manifestFile is what the watcher remembers of one manifest file.
type manifestFile struct {
	size    int64
	mtime   time.Time
	invalid string // last error reported, to report each once
}

// manifestFiles is what the manifests' files are like now.
func manifestFiles(ms []Manifest) map[string]*manifestFile {
	files := map[string]*manifestFile{}
	for _, m := range ms {
		if _, ok := files[m.Path]; !ok {
			f := &manifestFile{}
			if st, err := os.Stat(m.Path); err == nil {
				f.size, f.mtime = st.Size(), st.ModTime()
			}
			files[m.Path] = f
		}
	}
	return files
}

// watchManifests polls the manifest files at every tick and hands changed
// VMs to their workers. A file that stops parsing is reported once and
// otherwise ignored until it parses again; VMs that appear in a file are
// not picked up until the controller is restarted.
func (c *Controller) watchManifests(ctx context.Context, tick clock.Ticker, files map[string]*manifestFile) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		for path, f := range files {
			st, err := os.Stat(path)
			if err != nil || (st.Size() == f.size && st.ModTime().Equal(f.mtime)) {
				continue
			}
			f.size, f.mtime = st.Size(), st.ModTime()
			c.reloadManifest(ctx, path, f)
		}
	}
}

func (c *Controller) reloadManifest(ctx context.Context, path string, f *manifestFile) {
	data, err := os.ReadFile(path)
	var ms []Manifest
	if err == nil {
		ms, err = ParseManifests(ctx, c.cfg.Expander, path, data)
	}
	if err != nil {
		if msg := err.Error(); msg != f.invalid {
			f.invalid = msg
			c.log.Error("manifest changed but is not usable; keeping the previous spec", "err", err)
			if c.cfg.Observer != nil {
				c.cfg.Observer.Observe(Event{Time: c.clock.Now(), Event: EventManifestInvalid, Message: msg,
					TimeScale: c.timeScale(), Seed: c.cfg.Seed})
			}
		}
		return
	}
	f.invalid = ""
	for i := range ms {
		m := ms[i]
		w, err := c.worker(KeyOf(m.VM))
		if err != nil {
			c.log.Warn("VM added to a manifest is not managed until the controller restarts", "vm", KeyOf(m.VM).String(), "file", path)
			continue
		}
		select {
		case w.cmds <- command{op: opApply, manifest: &m}:
		case <-ctx.Done():
			return
		}
	}
}
