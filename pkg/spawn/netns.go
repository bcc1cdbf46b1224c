package spawn

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

// NewInNetNS starts a Spawner whose thread leaves this process's network
// namespace for a new, empty one of its own (unshare(CLONE_NEWNET), root
// needed). A network namespace belongs to a thread, and a child inherits
// the one of the thread that forked it, so every child of the Spawner runs
// in the new namespace, and so do sockets that Do's functions create.
//
// The namespace has no name and no bind mount: it lives as long as the
// Spawner's thread or one of its processes does. Once the Spawner is
// closed and its children have ended (or, after a SIGKILL of this process,
// once their parent-death signal has ended them), the kernel frees it, so
// a killed owner leaves nothing to clean up. Its loopback device starts
// down: bring it up with a child such as `ip link set lo up`.
func NewInNetNS() (*Spawner, error) {
	s, err := newSpawner(func() error { return syscall.Unshare(syscall.CLONE_NEWNET) })
	if err != nil {
		return nil, fmt.Errorf("creating a network namespace (unshare CLONE_NEWNET, root needed): %w", err)
	}
	return s, nil
}

// NetNSPath is the file of the spawner thread's network namespace,
// /proc/PID/task/TID/ns/net, valid while the spawner runs: what `nsenter
// --net=PATH` or `podman run --network ns:PATH` take.
func (s *Spawner) NetNSPath() string {
	return "/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(s.tid) + "/ns/net"
}

// Listen opens a listener in the spawner thread's network namespace (see
// net.Listen). The listener stays there whichever goroutine accepts.
func (s *Spawner) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := s.Do(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// DialContext connects to address in the spawner thread's network
// namespace (see net.Dialer.DialContext); it fits http.Transport's
// DialContext. The socket is made on the spawner's thread, which waits for
// the connection, so it suits nearby peers (loopback) only.
func (s *Spawner) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := s.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
