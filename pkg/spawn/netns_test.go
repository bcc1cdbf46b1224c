package spawn

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newNetNSSpawner is NewInNetNS, skipped where this test may not create
// a network namespace.
func newNetNSSpawner(t *testing.T) *Spawner {
	t.Helper()
	s, err := NewInNetNS()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("no network namespace here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNetNSChildren checks Go's fork path: a child started from the
// spawner's thread runs in that thread's namespace, not the process's, and
// the namespace is gone once the spawner is closed and the child ended.
func TestNetNSChildren(t *testing.T) {
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	s := newNetNSSpawner(t)
	path := s.NetNSPath()
	ns, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	if ns == host {
		t.Fatalf("the spawner's thread is in the host's namespace %s", host)
	}
	var out bytes.Buffer
	p, err := s.Start(Spec{Path: "readlink", Args: []string{"/proc/self/ns/net"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if got := strings.TrimSpace(out.String()); got != ns {
		t.Errorf("a child of the spawner is in namespace %q, want the spawner thread's %s (host %s)", got, ns, host)
	}
	// A new namespace has only lo, and it is down.
	out.Reset()
	p, err = s.Start(Spec{Path: "cat", Args: []string{"/sys/class/net/lo/operstate", "/proc/net/dev"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if n := strings.Count(out.String(), ":"); n != 1 {
		t.Errorf("the new namespace has %d devices, want lo only:\n%s", n, out.String())
	}
	if again, _ := os.Readlink("/proc/self/ns/net"); again != host {
		t.Errorf("the process's namespace changed to %s", again)
	}
	s.Close()
	// The runtime ends the thread just after the goroutine returns.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := os.Stat(path)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 5s after Close: %v", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNetNSSockets checks that Listen and DialContext act in the
// spawner's namespace: a listener there is not reachable from the host's
// loopback, but is from the namespace's.
func TestNetNSSockets(t *testing.T) {
	s := newNetNSSpawner(t)
	defer s.Close()
	up, err := s.Start(Spec{Path: "ip", Args: []string{"link", "set", "lo", "up"}})
	if err != nil {
		t.Fatal(err)
	}
	<-up.Done()
	if !up.Exit().Success() {
		t.Fatalf("ip link set lo up: %v", up.Exit())
	}
	l, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("inside\n"))
			c.Close()
		}
	}()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s answers in the host's namespace", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dialing %s inside the namespace: %v", addr, err)
	}
	defer c.Close()
	b := make([]byte, 7)
	if _, err := c.Read(b); err != nil || string(b) != "inside\n" {
		t.Errorf("read %q, %v; want the listener's greeting", b, err)
	}
}
