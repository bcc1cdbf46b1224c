package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/hypervisor"
	"github.com/crashloop-harness/crashloop/pkg/watchdog"
)

// SessionOptions says which libvirt a Session talks to.
type SessionOptions struct {
	// URI of an existing libvirt daemon. Empty means the embedded QEMU
	// driver under Root, run inside this process.
	URI string
	// Root is the embedded driver's state folder (one per VMI). Ignored
	// when URI is set.
	Root string
	// CapsCacheDir keeps QEMU's capability cache between launches of the
	// embedded driver. Empty disables the shared cache.
	CapsCacheDir string
	// Children, when set, reaps this process's children; a started
	// domain's QEMU is then watched there and Domain.Exited reports it.
	Children *Children
}

// Session is one libvirt connection with lifecycle events for the domains
// it starts; it implements hypervisor.Session. StartEventLoop must have run
// before Open.
type Session struct {
	opts SessionOptions
	conn *libvirt.Connect
}

// Open connects to libvirt, preparing the embedded driver's root first
// when no URI is given.
func Open(opts SessionOptions) (*Session, error) {
	uri := opts.URI
	if uri == "" {
		if opts.Root == "" {
			return nil, errors.New("opening libvirt: neither a URI nor an embedded root was given")
		}
		if err := PrepareEmbedRoot(opts.Root, opts.CapsCacheDir); err != nil {
			return nil, err
		}
		uri = EmbedURI(opts.Root)
	}
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		return nil, fmt.Errorf("connecting to libvirt at %s: %w", uri, err)
	}
	return &Session{opts: opts, conn: conn}, nil
}

// Embedded tells whether the session runs libvirt's embedded driver.
func (s *Session) Embedded() bool { return s.opts.URI == "" }

// Close saves the capability cache (embedded driver) and disconnects.
func (s *Session) Close() error {
	var errs []error
	if s.Embedded() {
		if err := SaveCapsCache(s.opts.Root, s.opts.CapsCacheDir); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := s.conn.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing libvirt connection: %w", err))
	}
	return errors.Join(errs...)
}

// Domain is a domain started by a Session, with its lifecycle events; it
// implements hypervisor.Domain.
type Domain struct {
	s        *Session
	d        *libvirt.Domain
	name     string
	events   chan hypervisor.Event
	exited   <-chan syscall.WaitStatus
	callback int
}

var _ hypervisor.Session = (*Session)(nil)

// Define registers the domain with libvirt and subscribes to its lifecycle
// events. Nothing runs yet.
func (s *Session) Define(dom *libvirtxml.Domain) (hypervisor.Domain, error) {
	xml, err := dom.Marshal()
	if err != nil {
		return nil, fmt.Errorf("rendering domain XML: %w", err)
	}
	out := &Domain{s: s, name: dom.Name, events: make(chan hypervisor.Event, 64)}
	id, err := s.conn.DomainEventLifecycleRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, ev *libvirt.DomainEventLifecycle) {
		name, err := d.GetName()
		if err != nil || name != out.name {
			return
		}
		select {
		case out.events <- translate(ev):
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to domain events: %w", err)
	}
	out.callback = id
	d, err := s.conn.DomainDefineXML(xml)
	if s.Embedded() {
		// The define is where the driver probes the emulator and writes
		// its capabilities. Save them now, not only at Close: a launcher
		// that is SIGKILLed while its VMI runs (virt-handler's Kill, a
		// pod's end) never reaches Close, and every later launch with the
		// same cache would probe again (seconds under TCG). Close saves
		// again and reports a failure; here a failed save costs only that.
		_ = SaveCapsCache(s.opts.Root, s.opts.CapsCacheDir)
	}
	if err != nil {
		_ = s.conn.DomainEventDeregister(id)
		return nil, fmt.Errorf("defining domain %s: %w", dom.Name, err)
	}
	out.d = d
	return out, nil
}

func translate(ev *libvirt.DomainEventLifecycle) hypervisor.Event {
	switch ev.Event {
	case libvirt.DOMAIN_EVENT_STARTED:
		return hypervisor.Event{Kind: hypervisor.EventStarted}
	case libvirt.DOMAIN_EVENT_SUSPENDED:
		return hypervisor.Event{Kind: hypervisor.EventSuspended}
	case libvirt.DOMAIN_EVENT_RESUMED:
		return hypervisor.Event{Kind: hypervisor.EventResumed}
	case libvirt.DOMAIN_EVENT_SHUTDOWN:
		return hypervisor.Event{Kind: hypervisor.EventShutdown}
	case libvirt.DOMAIN_EVENT_CRASHED:
		return hypervisor.Event{Kind: hypervisor.EventCrashed, Panicked: ev.Detail == int(libvirt.DOMAIN_EVENT_CRASHED_PANICKED)}
	case libvirt.DOMAIN_EVENT_STOPPED:
		r := hypervisor.StopOther
		switch libvirt.DomainEventStoppedDetailType(ev.Detail) {
		case libvirt.DOMAIN_EVENT_STOPPED_SHUTDOWN:
			r = hypervisor.StopShutdown
		case libvirt.DOMAIN_EVENT_STOPPED_DESTROYED:
			r = hypervisor.StopDestroyed
		case libvirt.DOMAIN_EVENT_STOPPED_CRASHED:
			r = hypervisor.StopCrashed
		case libvirt.DOMAIN_EVENT_STOPPED_FAILED:
			r = hypervisor.StopFailed
		}
		return hypervisor.Event{Kind: hypervisor.EventStopped, Reason: r}
	}
	return hypervisor.Event{Kind: hypervisor.EventOther}
}

// Events delivers the domain's lifecycle events.
func (d *Domain) Events() <-chan hypervisor.Event { return d.events }

// Exited delivers QEMU's wait status when the session's Children reaps it;
// nil before Start or without Children.
func (d *Domain) Exited() <-chan syscall.WaitStatus { return d.exited }

// Start boots the defined domain; paused leaves QEMU up with its vCPUs
// stopped until Resume.
func (d *Domain) Start(paused bool) error {
	flags := libvirt.DOMAIN_NONE
	if paused {
		flags = libvirt.DOMAIN_START_PAUSED
	}
	if err := d.d.CreateWithFlags(flags); err != nil {
		return fmt.Errorf("starting domain %s: %w", d.name, err)
	}
	if c := d.s.opts.Children; c != nil && d.s.Embedded() {
		if pid, err := d.PID(); err == nil {
			d.exited = c.Watch(pid)
		}
	}
	return nil
}

// QEMUStarted tells whether libvirt got as far as launching QEMU for this
// domain: with the embedded driver it writes QEMU's command line into the
// domain's log under the root before it starts QEMU. For an external
// daemon it cannot tell and returns false.
func (d *Domain) QEMUStarted() bool {
	if !d.s.Embedded() {
		return false
	}
	data, err := os.ReadFile(filepath.Join(d.s.opts.Root, "log", "qemu", d.name+".log"))
	return err == nil && strings.Contains(string(data), "qemu-system")
}

// Running tells whether the domain's vCPUs are running now.
func (d *Domain) Running() (bool, error) {
	state, _, err := d.d.GetState()
	if err != nil {
		return false, fmt.Errorf("reading state of domain %s: %w", d.name, err)
	}
	return state == libvirt.DOMAIN_RUNNING, nil
}

// Resume starts the vCPUs of a paused domain.
func (d *Domain) Resume() error {
	if err := d.d.Resume(); err != nil {
		return fmt.Errorf("resuming domain %s: %w", d.name, err)
	}
	return nil
}

// Shutdown presses the guest's ACPI power button.
func (d *Domain) Shutdown() error {
	if err := d.d.ShutdownFlags(libvirt.DOMAIN_SHUTDOWN_ACPI_POWER_BTN); err != nil {
		return fmt.Errorf("shutting down domain %s: %w", d.name, err)
	}
	return nil
}

// Destroy stops QEMU at once. Destroying a domain that is not running is
// not an error.
func (d *Domain) Destroy() error {
	if active, err := d.d.IsActive(); err == nil && !active {
		return nil
	}
	if err := d.d.Destroy(); err != nil {
		var lerr libvirt.Error
		if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_OPERATION_INVALID {
			return nil // already shut off
		}
		return fmt.Errorf("destroying domain %s: %w", d.name, err)
	}
	return nil
}

// Release undefines the domain and stops its events. Call it after the
// domain stopped.
func (d *Domain) Release() error {
	var errs []error
	if err := d.s.conn.DomainEventDeregister(d.callback); err != nil {
		errs = append(errs, fmt.Errorf("unsubscribing from domain events: %w", err))
	}
	if err := d.d.Undefine(); err != nil {
		errs = append(errs, fmt.Errorf("undefining domain %s: %w", d.name, err))
	}
	if err := d.d.Free(); err != nil {
		errs = append(errs, fmt.Errorf("freeing domain handle: %w", err))
	}
	return errors.Join(errs...)
}

// PID returns the QEMU process of the running domain.
func (d *Domain) PID() (int, error) {
	if d.s.Embedded() {
		data, err := os.ReadFile(filepath.Join(d.s.opts.Root, "run", "qemu", d.name+".pid"))
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				return pid, nil
			}
		}
	}
	pids := FindQEMU(d.name, "")
	if len(pids) != 1 {
		return 0, fmt.Errorf("finding the QEMU process of domain %s: %d candidates", d.name, len(pids))
	}
	return pids[0], nil
}

// Kill sends sig to the domain's QEMU process, as an outside fault would.
func (d *Domain) Kill(sig syscall.Signal) error {
	pid, err := d.PID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("sending %v to QEMU (pid %d): %w", sig, pid, err)
	}
	return nil
}

// FindQEMU lists the QEMU processes running domain name, and, when
// pathPart is not empty, whose command line also mentions pathPart (see
// watchdog.FindQEMU, which the cgo-free reaper runs).
func FindQEMU(name, pathPart string) []int { return watchdog.FindQEMU(name, pathPart) }

// ForgetDomain destroys and undefines a domain on an external libvirt, for
// a reaper cleaning up after a launcher that died.
func ForgetDomain(uri, name string) error {
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		return fmt.Errorf("connecting to libvirt at %s: %w", uri, err)
	}
	defer conn.Close()
	d, err := conn.LookupDomainByName(name)
	if err != nil {
		return nil // nothing left to forget
	}
	defer d.Free()
	if active, _ := d.IsActive(); active {
		_ = d.Destroy()
	}
	if err := d.Undefine(); err != nil {
		return fmt.Errorf("undefining domain %s: %w", name, err)
	}
	return nil
}
