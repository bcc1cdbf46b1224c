package monitor

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/info"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// dialErr is what virt-handler's watchdog sees: a plain unix dial.
func dialErr(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func TestCommandSocketRefusesDialsWithItsFileKeptThenServesAgain(t *testing.T) {
	dir := t.TempDir()
	s := &cmdSocket{initPath: filepath.Join(dir, "init"), readyPath: filepath.Join(dir, "ready"), log: slog.New(slog.DiscardHandler),
		register: func(srv *grpc.Server) {
			info.RegisterCmdInfoServer(srv, infoServer{})
			cmdv1.RegisterCmdServer(srv, &server{}) // Ping needs no monitor
		}}
	if err := s.listen(); err != nil {
		t.Fatal(err)
	}
	if err := dialErr(s.readyPath); err != nil {
		t.Fatalf("dial before the fault: %v", err)
	}
	if _, err := os.Stat(s.initPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the uninitialized socket is still there: %v", err)
	}
	// A client on the socket, as virt-handler keeps one.
	c, err := cmdclient.NewClient(s.readyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(); err != nil {
		t.Fatalf("ping before the fault: %v", err)
	}

	s.refuse(300 * time.Millisecond)
	if err := dialErr(s.readyPath); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	if _, err := os.Stat(s.readyPath); err != nil {
		t.Fatalf("the socket file must stay while refusing: %v", err)
	}
	if err := c.Ping(); err == nil {
		t.Fatal("the connection virt-handler held still answers while refusing")
	}
	deadline := time.Now().Add(5 * time.Second)
	for dialErr(s.readyPath) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the socket never listened again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	again, err := cmdclient.NewClient(s.readyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Ping(); err != nil {
		t.Fatalf("ping on the socket served again: %v", err)
	}

	s.close()
	if _, err := os.Stat(s.readyPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("close leaves the socket file: %v", err)
	}
}

func TestCommandSocketClosedWhileRefusingStaysClosed(t *testing.T) {
	dir := t.TempDir()
	s := &cmdSocket{initPath: filepath.Join(dir, "init"), readyPath: filepath.Join(dir, "ready"), log: slog.New(slog.DiscardHandler),
		register: func(*grpc.Server) {}}
	if err := s.listen(); err != nil {
		t.Fatal(err)
	}
	s.refuse(50 * time.Millisecond)
	s.close()
	time.Sleep(200 * time.Millisecond) // past the refusal: nothing may listen again
	if _, err := os.Stat(s.readyPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a closed socket came back: %v", err)
	}
}

// refusals records what a fault asked of the socket.
type refusals chan time.Duration

func (r refusals) refuse(d time.Duration) { r <- d }

func TestSocketFaultActsOnceAfterTheFirstRunning(t *testing.T) {
	m := New(Flags{Name: "a", Namespace: "ns", ShareDir: t.TempDir()}, t.TempDir(), slog.New(slog.DiscardHandler), io.Discard)
	got := make(refusals, 4)
	m.sock = got
	m.vmi = &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-1",
		Annotations: map[string]string{faults.AnnotationPrefix + "launcher-socket-unresponsive": "after=100ms,for=45s"}}}
	c := &child{}
	m.cur = c
	m.onEvent(c, launcherapi.Event{Event: launcherapi.EventScheduled})
	start := time.Now()
	m.onEvent(c, launcherapi.Event{Event: launcherapi.EventRunning})
	m.onEvent(c, launcherapi.Event{Event: launcherapi.EventRunning}) // a second Running acts no more
	select {
	case d := <-got:
		if d != 45*time.Second {
			t.Fatalf("refused for %v, want for=45s", d)
		}
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Fatalf("refused %v after Running, want after=100ms", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fault never acted")
	}
	select {
	case d := <-got:
		t.Fatalf("a second refusal (%v)", d)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestSocketFaultDoesNotActWithoutItsAnnotationOrAtZeroPercent(t *testing.T) {
	for _, ann := range []map[string]string{nil, {faults.AnnotationPrefix + "launcher-socket-unresponsive": "0%for=1s"}} {
		m := New(Flags{Name: "a", Namespace: "ns", ShareDir: t.TempDir()}, t.TempDir(), slog.New(slog.DiscardHandler), io.Discard)
		got := make(refusals, 1)
		m.sock = got
		m.vmi = &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-1", Annotations: ann}}
		c := &child{}
		m.cur = c
		m.onEvent(c, launcherapi.Event{Event: launcherapi.EventScheduled})
		m.onEvent(c, launcherapi.Event{Event: launcherapi.EventRunning})
		select {
		case d := <-got:
			t.Fatalf("annotations %v: refused for %v", ann, d)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
