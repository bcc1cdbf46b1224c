package clusterlite

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// The control plane and every process of StartProcess run in a network
// namespace of the control plane's own (spawn.NewInNetNS): an address that
// Endpoints accept (not loopback) goes on that namespace's lo, never on the
// host's, and the host reaches the API server only through a forward on its
// own 127.0.0.1.

// makeNetNS creates the namespace (the spawner's), brings its lo up, and
// starts the forward from a free port of the host's 127.0.0.1 to the same
// port inside, which it returns for the API server: the namespace's
// loopback has every port free.
func (cp *ControlPlane) makeNetNS(ctx context.Context) (int, error) {
	var err error
	if cp.spawner, err = spawn.NewInNetNS(); err != nil {
		return 0, err
	}
	if err := cp.inNetNS(ctx, "ip", "link", "set", "lo", "up"); err != nil {
		return 0, err
	}
	hostL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("listen for the API server's forward: %w", err)
	}
	port := hostL.Addr().(*net.TCPAddr).Port
	inside := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cp.forward = startForwarder(hostL, func(ctx context.Context) (net.Conn, error) {
		return cp.spawner.DialContext(ctx, "tcp", inside)
	}, cp.log)
	return port, nil
}

// NetNSPath is the file of the control plane's network namespace, valid
// while it runs: `nsenter --net=PATH` enters it.
func (cp *ControlPlane) NetNSPath() string { return cp.spawner.NetNSPath() }

// AddAddress puts ip on the namespace's lo (as a /32 or /128), where a
// component such as an aggregated API server can listen at an address of
// a Service's Endpoints. It goes with the namespace.
func (cp *ControlPlane) AddAddress(ctx context.Context, ip net.IP) error {
	bits := "/128"
	if ip.To4() != nil {
		bits = "/32"
	}
	return cp.inNetNS(ctx, "ip", "addr", "add", ip.String()+bits, "dev", "lo")
}

// Listen opens a listener in the control plane's network namespace (see
// net.Listen).
func (cp *ControlPlane) Listen(network, address string) (net.Listener, error) {
	l, err := cp.spawner.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s in the control plane's namespace: %w", address, err)
	}
	return l, nil
}

// inNetNS runs a short command in the namespace and waits for it.
func (cp *ControlPlane) inNetNS(ctx context.Context, bin string, args ...string) error {
	var out strings.Builder
	p, err := cp.spawner.Start(spawn.Spec{Path: bin, Args: args, Stdout: &out, Stderr: &out})
	if err != nil {
		return fmt.Errorf("in the control plane's namespace: %w", err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		_, _ = p.Stop(context.Background(), 0)
		return fmt.Errorf("in the control plane's namespace: %s %s: %w", bin, strings.Join(args, " "), ctx.Err())
	}
	if e := p.Exit(); !e.Success() {
		return fmt.Errorf("in the control plane's namespace: %s %s: %v: %s", bin, strings.Join(args, " "), e, strings.TrimSpace(out.String()))
	}
	return nil
}

// forwarder joins every connection accepted on a host listener to one
// dialled in the namespace, byte for byte in both directions (TLS passes
// through untouched, so the API server's certificate is what clients
// verify).
type forwarder struct {
	l    net.Listener
	dial func(context.Context) (net.Conn, error)
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// startForwarder serves l until close.
func startForwarder(l net.Listener, dial func(context.Context) (net.Conn, error), log *slog.Logger) *forwarder {
	ctx, cancel := context.WithCancel(context.Background())
	f := &forwarder{l: l, dial: dial, log: log, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f
}

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Add(1)
		go f.join(c)
	}
}

// track adds c to the open connections, or reports false once closing.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	_ = c.Close()
}

// join copies between the accepted connection and a new one inside until
// both directions have ended.
func (f *forwarder) join(outside net.Conn) {
	defer f.wg.Done()
	if !f.track(outside) {
		_ = outside.Close()
		return
	}
	defer f.untrack(outside)
	inside, err := f.dial(f.ctx)
	if err != nil {
		f.log.Debug("forward: dialling inside the namespace failed", "err", err)
		return
	}
	if !f.track(inside) {
		_ = inside.Close()
		return
	}
	defer f.untrack(inside)
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // pass the end on; the other way may still run
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go pipe(inside, outside)
	go pipe(outside, inside)
	wg.Wait()
}

// close stops accepting, closes every open connection and waits for the
// copies to end.
func (f *forwarder) close() {
	_ = f.l.Close()
	f.mu.Lock()
	f.cancel()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
