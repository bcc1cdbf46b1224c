package monitor

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	grpcutil "kubevirt.io/kubevirt/pkg/util/net/grpc"

	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// socketControl is what the launcher-socket-unresponsive fault acts on:
// the pod's command socket.
type socketControl interface {
	// refuse stops serving the socket for d, its file left in place, then
	// serves it again.
	refuse(d time.Duration)
}

// startSocketFaults schedules the faults of the VMI that act on the
// command socket (faults.PointCommandSocket), drawn with the pod's seed as
// attempt 1, as our launcher draws its own; called once, at the first
// Running, with mu held.
func (m *Monitor) startSocketFaults() {
	if m.sock == nil || m.vmi == nil {
		return
	}
	plan, err := faults.Parse(m.vmi.Annotations, nil)
	if err != nil {
		// Our launcher refused this VMI for the same reason already.
		m.log.Warn("the VMI's faults do not parse; none acts on the command socket", "err", err)
		return
	}
	key := m.vmi.Namespace + "/" + m.vmi.Name
	for _, d := range plan.Decide(faults.DecideInput{Seed: m.seed, Key: key, Attempt: 1}).At(faults.PointCommandSocket) {
		a, ok := d.Action.(faults.LauncherSocketUnresponsive)
		if !ok {
			continue
		}
		vmi := m.vmi.DeepCopy()
		time.AfterFunc(a.After, func() {
			msg := fmt.Sprintf("the command socket refuses dials for %v (%s)", a.For, d.Spec)
			m.log.Warn("fault fired: "+msg, "fault", d.Fault)
			m.notify.k8sEvent(vmi, "Warning", "FaultFired", d.Fault+": "+msg)
			m.sock.refuse(a.For)
		})
	}
}

// cmdSocket is the pod's command socket: KubeVirt's gRPC services on a
// unix socket made at the uninitialized path and renamed to the ready one,
// as KubeVirt's launcher marks itself ready.
type cmdSocket struct {
	initPath, readyPath string
	// register adds the services to a new server.
	register func(*grpc.Server)
	log      *slog.Logger

	mu     sync.Mutex
	srv    *grpc.Server // nil while refusing or closed
	closed bool
}

// listen serves the socket and marks it ready.
func (s *cmdSocket) listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listenLocked()
}

func (s *cmdSocket) listenLocked() error {
	lis, err := grpcutil.CreateSocket(s.initPath)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.initPath, err)
	}
	if ul, ok := lis.(*net.UnixListener); ok {
		// Closing the listener must not remove a path: the file it made
		// is renamed away, and a later listener may hold the name.
		ul.SetUnlinkOnClose(false)
	}
	srv := grpc.NewServer()
	s.register(srv)
	go func() { _ = srv.Serve(lis) }()
	// rename(2) replaces a socket file left by an earlier listener at
	// once: a dial finds the old, refusing one or the new one.
	if err := os.Rename(s.initPath, s.readyPath); err != nil {
		srv.Stop()
		_ = os.Remove(s.initPath)
		return fmt.Errorf("marking the launcher ready (%s → %s): %w", s.initPath, s.readyPath, err)
	}
	s.srv = srv
	return nil
}

// refuse implements socketControl: the server stops (its listener and
// every connection close, so an RPC in flight fails Unavailable), the
// socket file stays, and a dial is refused, which is what virt-handler's
// stale-socket watchdog tests; after d a new server listens.
func (s *cmdSocket) refuse(d time.Duration) {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || s.srv != nil {
			return
		}
		if err := s.listenLocked(); err != nil {
			s.log.Error("listening on the command socket again", "err", err)
			return
		}
		s.log.Info("the command socket listens again", "socket", s.readyPath, "after", d)
	})
}

// crashed ends serving at once and leaves the socket file, as a crashed
// launcher process leaves it: dials are refused from then on.
func (s *cmdSocket) crashed() {
	s.mu.Lock()
	srv := s.srv
	s.srv, s.closed = nil, true
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// close ends serving for good, gracefully within a second, and removes the
// socket file.
func (s *cmdSocket) close() {
	s.mu.Lock()
	srv := s.srv
	s.srv, s.closed = nil, true
	s.mu.Unlock()
	if srv != nil {
		stopServer(srv)
	}
	_ = os.Remove(s.readyPath)
}
