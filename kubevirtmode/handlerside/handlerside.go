// Package handlerside is virt-handler's side of one KubeVirt v1.6.0
// launcher pod, built from virt-handler's own code: its notify server
// (pkg/virt-handler/notify-server) behind the pod's
// domain-notify-pipe.sock, and its cmd client (pkg/virt-handler/cmd-client)
// on the pod's launcher socket. The conformance suite drives the launcher
// image with it, and the Driver (cmd/virt-handler-driver) plays
// virt-handler's start/stop path for one pod of cluster-lite's node agent.
package handlerside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	v1 "kubevirt.io/api/core/v1"

	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	eventsserver "kubevirt.io/kubevirt/pkg/virt-handler/notify-server"
)

// Files of a launcher pod's volumes, as KubeVirt v1.6.0 names them.
const (
	// NotifyPipe is the socket in the pod's public volume
	// (/var/run/kubevirt) that the launcher's notify client dials.
	NotifyPipe = "domain-notify-pipe.sock"
	// LauncherSocket is the ready command socket in the sockets volume
	// (launcher-init-sock until the launcher is ready).
	LauncherSocket = "launcher-sock"
	// notifyServerSocket is what the notify server listens on in its
	// own folder (eventsserver.RunServer).
	notifyServerSocket = "domain-notify.sock"
)

// Notify is virt-handler's notify server for one pod, and the pipe from
// the pod's domain-notify-pipe.sock to it (virt-handler's
// startDomainNotifyPipe makes the same pipe inside the pod).
type Notify struct {
	// Events receives every domain event the launcher sent, decoded
	// into *api.Domain by the server.
	Events chan watch.Event
	// Recorder receives the launcher's Kubernetes events.
	Recorder *record.FakeRecorder
	stop     chan struct{}
	done     chan struct{}
	pipe     net.Listener
}

// StartNotify runs the notify server in handlerDir and listens on
// publicDir/domain-notify-pipe.sock (publicDir is the host folder of the
// pod's public volume). vmi is the server's one VMI (its Kubernetes
// events name it).
func StartNotify(handlerDir, publicDir string, vmi *v1.VirtualMachineInstance) (*Notify, error) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(vmi); err != nil {
		return nil, fmt.Errorf("notify server: adding VMI %s/%s to its store: %w", vmi.Namespace, vmi.Name, err)
	}
	pipe, err := net.Listen("unix", filepath.Join(publicDir, NotifyPipe))
	if err != nil {
		return nil, fmt.Errorf("notify pipe: %w", err)
	}
	if err := handPipeTo(filepath.Join(publicDir, NotifyPipe), vmi); err != nil {
		pipe.Close()
		return nil, err
	}
	n := &Notify{Events: make(chan watch.Event, 100), Recorder: record.NewFakeRecorder(100),
		stop: make(chan struct{}), done: make(chan struct{}), pipe: pipe}
	go func() {
		defer close(n.done)
		_ = eventsserver.RunServer(handlerDir, n.stop, n.Events, n.Recorder, store)
	}()
	target := filepath.Join(handlerDir, notifyServerSocket)
	go func() {
		for {
			in, err := pipe.Accept()
			if err != nil {
				return
			}
			go pipeTo(in, target)
		}
	}()
	return n, nil
}

// handPipeTo gives the pipe's socket to a non-root VMI's launcher user,
// as virt-handler's startDomainNotifyPipe does (SetFileOwnership when
// status.runtimeUser is not root): connecting to a socket needs write
// permission on it, which root's socket would deny the launcher.
func handPipeTo(path string, vmi *v1.VirtualMachineInstance) error {
	u := vmi.Status.RuntimeUser
	if u == 0 {
		return nil
	}
	if err := os.Chown(path, int(u), int(u)); err != nil {
		return fmt.Errorf("notify pipe: handing it to the launcher's user %d: %w", u, err)
	}
	return nil
}

func pipeTo(in net.Conn, target string) {
	defer in.Close()
	out, err := net.Dial("unix", target)
	if err != nil {
		return
	}
	defer out.Close()
	go func() { _, _ = io.Copy(out, in) }()
	_, _ = io.Copy(in, out)
}

// Stop stops the server and the pipe (virt-handler going away) and waits
// up to timeout for the server to end. Calling it again does nothing.
func (n *Notify) Stop(timeout time.Duration) error {
	select {
	case <-n.stop:
		return nil
	default:
	}
	close(n.stop)
	_ = n.pipe.Close()
	select {
	case <-n.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the notify server did not stop within %v", timeout)
	}
}

// ErrPodEnded is Connect's error when the pod ended first.
var ErrPodEnded = errors.New("the launcher pod ended before its socket was ready")

// Connect waits for the ready launcher socket at path (polling every
// 20 ms) until ctx ends or ended is closed, then makes virt-handler's cmd
// client, which does the CmdInfo/Info handshake.
func Connect(ctx context.Context, path string, ended <-chan struct{}) (cmdclient.LauncherClient, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		select {
		case <-ended:
			return nil, ErrPodEnded
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the launcher socket %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
	c, err := cmdclient.NewClient(path)
	if err != nil {
		return nil, fmt.Errorf("connecting virt-handler's client to %s: %w", path, err)
	}
	return c, nil
}
