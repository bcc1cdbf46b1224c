package handlerside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"

	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Driver plays virt-handler's start/stop path for one launcher pod: it
// serves the pod's notify pipe, waits for the launcher socket, syncs the
// VMI (retrying, as virt-handler does, while the launcher answers with an
// error), follows the domain events and writes what they mean for the
// VMI's phase as launcherapi event lines (Scheduled once the VMI is
// synced, Running, then Succeeded or Failed), which is what cluster-lite's
// node agent follows. On a stop request it does virt-handler's graceful
// stop: Shutdown, Kill once the grace period passed, then Delete. Once the
// domain ended it deletes it, so the launcher exits.
type Driver struct {
	// VMI is what SyncVirtualMachine sends.
	VMI *v1.VirtualMachineInstance
	// Volumes is the host folder of the pod's emptyDir volumes, one
	// sub-folder per volume name (it uses "public" and "sockets").
	Volumes string
	// HandlerDir is the notify server's own folder.
	HandlerDir string
	// Grace is how long a graceful stop waits before Kill; 0 means the
	// VMI's terminationGracePeriodSeconds.
	Grace time.Duration
	// SocketTimeout bounds the wait for the launcher socket; 0 means
	// virt-handler's 3 minutes.
	SocketTimeout time.Duration
	// Out receives the event lines; Log the driver's own log.
	Out io.Writer
	Log *slog.Logger
}

// run is one Run's state.
type run struct {
	d       *Driver
	n       *Notify
	c       cmdclient.LauncherClient
	running bool   // Running was written
	final   string // the final event written, if any
}

// Run drives the pod until its domain ended and was deleted, the pod
// ended, or stop was closed and the graceful stop finished; ctx ending
// abandons everything at once.
func (d *Driver) Run(ctx context.Context, stop <-chan struct{}) error {
	if err := d.check(); err != nil {
		return err
	}
	restore, err := d.shortPaths()
	if err != nil {
		return err
	}
	defer restore()
	n, err := StartNotify(d.HandlerDir, filepath.Join(d.Volumes, "public"), d.VMI)
	if err != nil {
		return err
	}
	defer func() { _ = n.Stop(10 * time.Second) }()
	timeout := d.SocketTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	c, err := Connect(cctx, d.socket(), stop)
	cancel()
	if errors.Is(err, ErrPodEnded) {
		d.Log.Info("stop requested before the launcher socket was ready")
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	r := &run{d: d, n: n, c: c}
	return r.drive(ctx, stop)
}

func (d *Driver) check() error {
	switch {
	case d.VMI == nil:
		return errors.New("driver: no VMI")
	case d.Volumes == "" || d.HandlerDir == "":
		return errors.New("driver: the pod's volume folder and the handler folder are both needed")
	case d.Out == nil || d.Log == nil:
		return errors.New("driver: Out and Log are both needed")
	}
	return nil
}

// shortPaths points Volumes and HandlerDir through symbolic links in a
// new temporary folder: a socket's path must fit in 108 bytes, and the
// node agent's pod folders are deeper than that allows. restore removes
// the links and puts the paths back.
func (d *Driver) shortPaths() (restore func(), err error) {
	short, err := os.MkdirTemp("", "virt-handler-driver-")
	if err != nil {
		return nil, fmt.Errorf("making the folder of short socket paths: %w", err)
	}
	volumes, handler := d.Volumes, d.HandlerDir
	restore = func() {
		d.Volumes, d.HandlerDir = volumes, handler
		_ = os.RemoveAll(short)
	}
	for link, target := range map[string]string{"v": volumes, "h": handler} {
		abs, err := filepath.Abs(target)
		if err == nil {
			err = os.Symlink(abs, filepath.Join(short, link))
		}
		if err != nil {
			restore()
			return nil, fmt.Errorf("linking %s for a short socket path: %w", target, err)
		}
	}
	d.Volumes, d.HandlerDir = filepath.Join(short, "v"), filepath.Join(short, "h")
	return restore, nil
}

func (d *Driver) socket() string { return filepath.Join(d.Volumes, "sockets", LauncherSocket) }

// podGone reports whether the launcher's socket is gone (the launcher
// removes it when it exits).
func (d *Driver) podGone() bool {
	_, err := os.Stat(d.socket())
	return os.IsNotExist(err)
}

func (d *Driver) grace() time.Duration {
	if d.Grace > 0 {
		return d.Grace
	}
	if g := d.VMI.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return time.Duration(v1.DefaultGracePeriodSeconds) * time.Second
}

// emit writes one event line about the VMI.
func (r *run) emit(event, reason, message string) {
	vmi := r.d.VMI
	phase := map[string]string{launcherapi.EventScheduled: launcherapi.PhaseScheduled, launcherapi.EventRunning: launcherapi.PhaseRunning,
		launcherapi.EventSucceeded: launcherapi.PhaseSucceeded, launcherapi.EventFailed: launcherapi.PhaseFailed}[event]
	line, err := launcherapi.Event{Time: time.Now(), Event: event, VMI: vmi.Name, Namespace: vmi.Namespace, UID: string(vmi.UID),
		Phase: phase, Reason: reason, Message: message}.MarshalLine()
	if err == nil {
		_, err = r.d.Out.Write(line)
	}
	if err != nil {
		r.d.Log.Error("writing an event line", "event", event, "err", err)
	}
	switch {
	case event == launcherapi.EventRunning:
		r.running = true
	case event == launcherapi.EventSucceeded || event == launcherapi.EventFailed:
		r.final = event
	}
}

// drive sends SyncVirtualMachine until the launcher accepts it (once a
// second while it refuses, as virt-handler's re-queue), then follows the
// domain until it ended, the pod ended or a stop was asked for.
func (r *run) drive(ctx context.Context, stop <-chan struct{}) error {
	retry := time.NewTimer(0)
	defer retry.Stop()
	watchPod := time.NewTicker(time.Second)
	defer watchPod.Stop()
	synced := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return r.stop(ctx)
		case ev := <-r.n.Events:
			if r.observe(ev); r.ended() {
				return r.delete(ctx)
			}
		case <-retry.C:
			if r.d.podGone() {
				return errors.New("the launcher pod ended before it accepted the VMI")
			}
			if err := r.c.SyncVirtualMachine(r.d.VMI, nil); err != nil {
				// virt-handler records it as a SyncFailed event and retries.
				r.d.Log.Warn("SyncVirtualMachine failed, retrying", "err", err)
				retry.Reset(time.Second)
				continue
			}
			synced = true
			r.d.Log.Info("VMI synced")
			r.emit(launcherapi.EventScheduled, "", "SyncVirtualMachine accepted the VMI")
		case <-watchPod.C:
			if synced && r.d.podGone() {
				if !r.ended() {
					return errors.New("the launcher pod ended without a final domain state")
				}
				return nil
			}
		}
	}
}

func (r *run) ended() bool { return r.final != "" }

// observe takes in one domain event: the first running state writes
// Running, the first final state the final event.
func (r *run) observe(ev watch.Event) {
	d, _ := ev.Object.(*api.Domain)
	if d != nil {
		r.d.Log.Info("domain event", "type", ev.Type, "state", d.Status.Status, "reason", d.Status.Reason)
	}
	if ev.Type == watch.Deleted || (d != nil && d.Status.Status == api.NoState && d.Status.Reason == api.ReasonNonExistent) {
		d = nil
	}
	event, reason := Phase(d, r.d.VMI, r.running)
	switch {
	case r.ended() || event == "":
	case event == launcherapi.EventRunning:
		if !r.running {
			r.emit(event, "", "")
		}
	case d == nil:
		r.emit(event, reason, "the domain is gone")
	default:
		r.emit(event, reason, fmt.Sprintf("domain %s/%s", d.Status.Status, d.Status.Reason))
	}
}

// waitEnded reads domain events until the domain ended, the pod ended or
// timeout passed; it reports whether the domain (or the pod) ended.
func (r *run) waitEnded(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	watchPod := time.NewTicker(time.Second)
	defer watchPod.Stop()
	for !r.ended() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case ev := <-r.n.Events:
			r.observe(ev)
		case <-watchPod.C:
			if r.d.podGone() {
				return true
			}
		}
	}
	return true
}

// stop is virt-handler's graceful stop: ShutdownVirtualMachine (the ACPI
// power button) and, once the grace period passed, KillVirtualMachine; a
// domain that never ran is killed at once. Then the domain is deleted.
func (r *run) stop(ctx context.Context) error {
	if r.d.podGone() {
		return nil // nothing left to stop
	}
	grace := r.d.grace()
	if !r.ended() && r.running {
		r.d.Log.Info("stop requested: ShutdownVirtualMachine", "gracePeriod", grace)
		if err := r.c.ShutdownVirtualMachine(r.d.VMI); err != nil {
			r.d.Log.Warn("ShutdownVirtualMachine failed", "err", err)
		}
		r.waitEnded(ctx, grace)
	}
	if !r.ended() && !r.d.podGone() {
		r.d.Log.Info("KillVirtualMachine", "running", r.running)
		if err := r.c.KillVirtualMachine(r.d.VMI); err != nil {
			r.d.Log.Warn("KillVirtualMachine failed", "err", err)
		}
		r.waitEnded(ctx, 30*time.Second)
	}
	return r.delete(ctx)
}

// delete is DeleteVirtualMachine; the launcher then exits, which this
// waits for (the socket goes) up to 30 s.
func (r *run) delete(ctx context.Context) error {
	if r.d.podGone() {
		return nil
	}
	r.d.Log.Info("DeleteVirtualMachine")
	if err := r.c.DeleteDomain(r.d.VMI); err != nil {
		return fmt.Errorf("DeleteVirtualMachine: %w", err)
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	watchPod := time.NewTicker(100 * time.Millisecond)
	defer watchPod.Stop()
	for !r.d.podGone() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return errors.New("the launcher did not exit within 30 s of DeleteVirtualMachine")
		case ev := <-r.n.Events:
			r.observe(ev)
		case <-watchPod.C:
		}
	}
	return nil
}
