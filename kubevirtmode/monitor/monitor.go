package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Upstream's waitForFinalNotify (cmd/virt-launcher/virt-launcher.go): after
// the domain ended, the launcher waits 15 s for virt-handler's
// DeleteVirtualMachine, kills the domain, and waits 30 s more.
const (
	finalNotifyWait = 15 * time.Second
	finalKillWait   = 30 * time.Second
	// undefineJobWait is libvirt's wait for a domain's job lock
	// (QEMU_JOB_WAIT_TIME), which an undefine during a start waits on.
	undefineJobWait = 30 * time.Second
)

// Monitor is the state of one launcher pod: the VMI it was given, the
// domain it reports, and the run of our launcher that backs the domain.
type Monitor struct {
	f      Flags
	log    *slog.Logger
	stderr io.Writer
	notify *notifier
	dir    string // parent of the launch folders, one per start

	mu           sync.Mutex
	vmi          *v1.VirtualMachineInstance
	domain       *api.Domain
	ifaces       []api.Interface // the domain's, as KubeVirt's phase 2 completed them
	cur          *child
	children     map[int]*child // by PID, for the reaper
	starts       int
	running      bool   // cur reached Running
	everRunning  bool   // some start reached Running
	startErr     string // why the last start failed before Running
	killed       bool   // cur was SIGKILLed by Kill or Delete
	ended        bool   // the domain ended after Running (or was stopped)
	deleteWanted bool
	deleted      bool
	changed      chan struct{} // closed and replaced on every change
	exit         chan int      // the code the monitor ends with
	deletedCh    chan struct{}
	// die ends the process at once with a crashed launcher's code.
	die func(code int)
	// seed is the pod's: our launcher's --seed, and the draw of the
	// faults the monitor applies itself.
	seed launcherapi.Seed
	// sock is the command socket those faults act on; nil leaves them
	// undone (a Monitor without a socket, in unit tests).
	sock socketControl
	// podNetwork is our launcher's --pod-network for the next start
	// (podNetworkOfThisNamespace), and phase2 KubeVirt's pod network
	// setup before it (kubevirtPhase2); unit tests give their own.
	podNetwork func() string
	phase2     phase2Func
}

// New makes the monitor of one pod; dir holds the launch folders.
func New(f Flags, dir string, log *slog.Logger, stderr io.Writer) *Monitor {
	return &Monitor{f: f, log: log, stderr: stderr, dir: dir, notify: newNotifier(f.ShareDir, log),
		children: map[int]*child{}, changed: make(chan struct{}), exit: make(chan int, 1), deletedCh: make(chan struct{}),
		die: os.Exit, seed: launcherapi.PickSeed(), podNetwork: podNetworkOfThisNamespace, phase2: kubevirtPhase2}
}

// broadcast wakes every waiter; call with mu held.
func (m *Monitor) broadcast() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// exitWith ends the monitor with code (the first call wins).
func (m *Monitor) exitWith(code int) {
	select {
	case m.exit <- code:
	default:
	}
}

// Sync is SyncVirtualMachine: the first call starts our launcher on vmi
// and every call waits until the domain is running (nil) or its start
// failed (the error virt-handler retries on). It is idempotent: a running
// or ended domain is left alone, and a failed start is retried. Before
// each start KubeVirt's phase 2 sets the pod network up (setUpPodNetwork,
// with the request's interface domain attachments), as KubeVirt's
// launcher does before it defines the domain; its error fails the Sync.
func (m *Monitor) Sync(ctx context.Context, vmi *v1.VirtualMachineInstance, attachments map[string]string) error {
	m.mu.Lock()
	if m.vmi != nil && m.vmi.UID != vmi.UID {
		defer m.mu.Unlock()
		return fmt.Errorf("this launcher pod runs VMI %s/%s (UID %s), not UID %s", m.vmi.Namespace, m.vmi.Name, m.vmi.UID, vmi.UID)
	}
	if vmi.Namespace != m.f.Namespace || vmi.Name != m.f.Name {
		defer m.mu.Unlock()
		return fmt.Errorf("VMI %s/%s: this launcher pod was started for %s/%s (--namespace, --name)", vmi.Namespace, vmi.Name, m.f.Namespace, m.f.Name)
	}
	m.vmi = vmi.DeepCopy()
	if m.ended || m.deleteWanted {
		m.mu.Unlock()
		return nil
	}
	if m.cur == nil {
		mode := m.podNetwork()
		ifaces, err := setUpPodNetwork(m.phase2, mode, m.vmi, attachments)
		if err != nil {
			m.mu.Unlock()
			return err
		}
		m.ifaces = ifaces
		m.starts++
		c, err := startChild(m.f, m.seed, mode, m.vmi, filepath.Join(m.dir, fmt.Sprintf("start-%d", m.starts)), m.stderr)
		if err != nil {
			m.mu.Unlock()
			return err
		}
		m.log.Info("started the launcher", "pid", c.pid(), "start", m.starts)
		m.cur, m.running, m.startErr, m.killed = c, false, "", false
		m.children[c.pid()] = c
		go m.follow(c)
	}
	c := m.cur
	for m.cur == c && !m.running {
		wait := m.changed
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the domain to run: %w", ctx.Err())
		}
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	if m.running || m.ended {
		return nil
	}
	return errors.New(m.startErr)
}

// follow turns one launcher run's events into domain events, and its end
// into the domain's end, a failed start or a launcher crash.
func (m *Monitor) follow(c *child) {
	var final *launcherapi.Event
	for ev := range c.events {
		m.onEvent(c, ev)
		if ev.Final() {
			final = &ev
		}
	}
	ws := <-c.exited
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.children, c.pid())
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	switch {
	case m.killed:
		m.endDomain(api.Shutoff, api.ReasonDestroyed)
	case final != nil && (m.running || final.Phase == launcherapi.PhaseSucceeded):
		state, reason := finalState(*final, m.running)
		m.endDomain(state, reason)
	case final != nil:
		m.startErr = fmt.Sprintf("the domain did not start: %s: %s", final.Reason, final.Message)
		m.setState(api.Shutoff, api.ReasonFailed)
	case code == int(launcherapi.ExitUsage) || code == int(launcherapi.ExitInputUnreadable) || code == int(launcherapi.ExitInvalidManifest):
		m.startErr = fmt.Sprintf("the launcher refused the VMI (exit %d): %s", code, c.tail)
	default:
		// A launcher crash: KubeVirt's virt-launcher-monitor ends with its
		// launcher's exit code, and virt-handler finds the socket dead.
		// The whole process goes at once, as KubeVirt's does: an RPC in
		// flight (SyncVirtualMachine) fails with Unavailable, no notice
		// is flushed.
		m.log.Error("the launcher crashed", "pid", c.pid(), "exit", code)
		m.die(code)
	}
	if m.cur == c {
		m.cur, m.running = nil, false
	}
	m.broadcast()
	if m.deleteWanted {
		m.finishDelete()
	} else if m.ended {
		go m.awaitDelete()
	}
}

func (m *Monitor) onEvent(c *child, ev launcherapi.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != c {
		return
	}
	switch ev.Event {
	case launcherapi.EventScheduled:
		if m.domain == nil {
			m.domain = newDomain(m.vmi, graceSeconds(m.vmi))
			m.domain.Spec.Devices.Interfaces = m.ifaces
			m.notify.domainEvent(watch.Added, m.domain)
		}
		m.setState(api.Shutoff, api.ReasonUnknown)
	case launcherapi.EventRunning:
		if !m.everRunning {
			m.startSocketFaults()
		}
		m.running, m.everRunning = true, true
		m.setState(api.Running, api.ReasonUnknown)
		m.broadcast()
	case launcherapi.EventFaultFired:
		m.notify.k8sEvent(m.vmi, "Warning", "FaultFired", fmt.Sprintf("%s: %s", ev.Fault, ev.Message))
	}
}

// setState changes the domain's state and sends Modified; mu held.
func (m *Monitor) setState(state api.LifeCycle, reason api.StateChangeReason) {
	if m.domain == nil {
		return
	}
	m.domain.SetState(state, reason)
	m.notify.domainEvent(watch.Modified, m.domain)
}

func (m *Monitor) endDomain(state api.LifeCycle, reason api.StateChangeReason) {
	m.ended = true
	m.setState(state, reason)
}

// awaitDelete is upstream's wait for the final delete notification: the
// monitor exits 0 when DeleteVirtualMachine came, or after 45 s.
func (m *Monitor) awaitDelete() {
	select {
	case <-m.deletedCh:
	case <-time.After(finalNotifyWait + finalKillWait):
		m.log.Info("no DeleteVirtualMachine after the domain ended; exiting")
		m.exitWith(0)
	}
}

// Shutdown is ShutdownVirtualMachine: mark the graceful shutdown in the
// domain's metadata (deletion timestamp) and press the ACPI power button
// (our launcher's SIGTERM). It never destroys: virt-handler calls Kill when
// the grace period is over.
func (m *Monitor) Shutdown() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domain == nil || m.ended {
		return nil
	}
	gp := m.domain.Spec.Metadata.KubeVirt.GracePeriod
	if gp.DeletionTimestamp == nil {
		now := metav1.Now()
		gp.DeletionTimestamp = &now
		marked := true
		gp.MarkedForGracefulShutdown = &marked
		m.notify.domainEvent(watch.Modified, m.domain)
	}
	if m.cur != nil {
		m.cur.signal(syscall.SIGTERM)
	}
	return nil
}

// Kill is KillVirtualMachine: destroy the domain now (SIGKILL to our
// launcher, whose reaper kills QEMU); the domain ends Shutoff/Destroyed.
func (m *Monitor) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killLocked()
	return nil
}

func (m *Monitor) killLocked() {
	if m.cur != nil && !m.killed {
		m.killed = true
		m.cur.signal(syscall.SIGKILL)
	}
}

// Delete is DeleteVirtualMachine, which KubeVirt's launcher serves with
// libvirt's undefine alone (DeleteVMI in virtwrap/manager.go): a domain
// that is not running goes away, the final delete notification is sent and
// the monitor exits 0, as KubeVirt's launcher does after it. A live domain
// is left running as a transient domain, as undefine leaves it: the final
// notification and the exit come when it ends. virt-handler deletes a live
// domain only when it takes it for inactive (a start it saw Shutoff); a
// start in flight holds libvirt's job lock, which undefine waits for up to
// libvirt's 30 s before it fails.
func (m *Monitor) Delete(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleteWanted = true
	if m.cur == nil {
		m.finishDelete()
		return nil
	}
	if m.killed || m.running {
		m.logTransient()
		return nil
	}
	c := m.cur
	deadline := time.NewTimer(undefineJobWait)
	defer deadline.Stop()
	for m.cur == c && !m.running {
		wait := m.changed
		m.mu.Unlock()
		select {
		case <-wait:
		case <-deadline.C:
			m.mu.Lock()
			return fmt.Errorf("undefining the domain: timed out after %v waiting for the start to release the domain's job", undefineJobWait)
		case <-ctx.Done():
			m.mu.Lock()
			return fmt.Errorf("undefining the domain while it starts: %w", ctx.Err())
		}
		m.mu.Lock()
	}
	// A start that failed ended the domain, and follow finished the delete.
	if m.cur == c && m.running {
		m.logTransient()
	}
	return nil
}

// logTransient says that a deleted domain runs on; mu held.
func (m *Monitor) logTransient() {
	if !m.killed && m.domain != nil {
		m.log.Info("domain undefined while it runs: it runs on as a transient domain until it ends, as under libvirt")
		m.notify.domainEvent(watch.Modified, m.domain)
	}
}

func (m *Monitor) finishDelete() {
	if m.deleted {
		return
	}
	m.deleted = true
	if m.domain != nil {
		markDeleted(m.domain, metav1.Now())
		m.notify.domainEvent(watch.Modified, m.domain)
	}
	close(m.deletedCh)
	m.exitWith(0)
}

// Domain is GetDomain's answer: a copy of the domain, nil when there is none.
//
// While a start is in flight (our launcher's Scheduled, before Running) it
// answers Paused/StartingUp, the state libvirt gives a domain whose QEMU
// starts (it runs QEMU with -S until the domain is set up), which is what
// KubeVirt's launcher reads back for GetDomain (ListAllDomains, GetState).
// The pushed events keep Shutoff/Unknown there, as upstream's: libvirt
// sends no lifecycle event for the start-up pause, so virt-handler sees it
// only when it lists the domain (a restarted virt-handler, a resync). To
// that listing Paused is alive (vm.go, domainAlive) and Shutoff is not: a
// restarted virt-handler would delete a starting domain it found Shutoff.
func (m *Monitor) Domain() *api.Domain {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domain == nil || m.deleted {
		return nil
	}
	d := m.domain.DeepCopy()
	if m.startingLocked() {
		d.SetState(api.Paused, api.ReasonPausedStartingUp)
	}
	return d
}

// startingLocked reports a start in flight: a run of our launcher that
// reported Scheduled, not yet Running, and was neither killed nor ended.
func (m *Monitor) startingLocked() bool {
	return m.cur != nil && !m.running && !m.killed && !m.ended &&
		m.domain.Status.Status == api.Shutoff && m.domain.Status.Reason == api.ReasonUnknown
}
