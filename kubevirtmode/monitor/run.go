package monitor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/info"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/kubevirtmode/hooksidecar"
)

// Run is the whole compute process: serve the command socket, mark it
// ready, and end with the monitor's exit code (0 after the final delete
// notification; the launcher's code when it crashed).
func Run(ctx context.Context, f Flags, log *slog.Logger, stderr io.Writer) (int, error) {
	f.logIgnoredFeatures(log)
	if f.SimulateCrash {
		// cmd/virt-launcher/virt-launcher.go: before any socket exists.
		if f.KeepAfterFailure {
			keptWithoutSocket(log)
		}
		launchplan.SimulatedCrash(log, "--simulate-crash")
	}
	// PID 1 of the compute container, or a subreaper: QEMU (daemonized by
	// libvirt) and our launcher's reaper end up as our children.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("becoming a child subreaper: %w", err)
	}
	m := New(f, filepath.Join(f.EphemeralDiskDir, "crashloop"), log, stderr)
	go m.reap()

	cmdclient.SetBaseDir(f.ShareDir)
	initSock, readySock := cmdclient.UninitializedSocketOnGuest(), cmdclient.SocketOnGuest()
	if err := os.MkdirAll(filepath.Dir(initSock), 0o755); err != nil {
		return 1, fmt.Errorf("making the socket folder: %w", err)
	}
	sock := &cmdSocket{initPath: initSock, readyPath: readySock, log: log, register: func(srv *grpc.Server) {
		info.RegisterCmdInfoServer(srv, infoServer{})
		cmdv1.RegisterCmdServer(srv, &server{m: m})
	}}
	m.sock = sock
	m.die = func(code int) {
		if f.KeepAfterFailure {
			// cmd/virt-launcher-monitor: the launcher is gone, the
			// container stays for debugging.
			sock.crashed()
			log.Info("keeping the container alive since --keep-after-failure is set", "exit", code)
			select {}
		}
		os.Exit(code)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if err := sock.listen(); err != nil {
		return 1, err
	}
	log.Info("marked as ready", "socket", readySock)
	timer := time.AfterFunc(f.QemuTimeout, m.startTimedOut)
	defer timer.Stop()

	var code int
	select {
	case code = <-m.exit:
	case s := <-sigs:
		log.Info("received signal", "signal", s.String())
		code = m.stopOnSignal(sigs)
	case <-ctx.Done():
		code = 1
	}
	if f.HookSidecars > 0 {
		// cmd/virt-launcher: once the domain is gone, the pod's hook
		// sidecars get their Shutdown hook, so that the pod can end.
		if err := hooksidecar.ShutdownPod(f.HookSidecars, 10*time.Second); err != nil {
			log.Warn("hook sidecars' Shutdown", "err", err)
		}
	}
	sock.close()
	m.notify.closeWithin(5 * time.Second)
	return code, nil
}

// keptWithoutSocket is --simulate-crash with --keep-after-failure, as
// KubeVirt's cmd/virt-launcher-monitor does it: virt-launcher panics before
// it makes its socket, and the monitor, told to keep the container for
// debugging, stays forever with no socket. Its signal handler only
// forwards termination signals to the dead launcher, so they end nothing;
// the container ends when kubelet kills it after the pod's grace period.
// virt-handler meanwhile finds the pod without a socket and fails the VMI
// after its 3 minutes' wait for one.
func keptWithoutSocket(log *slog.Logger) {
	launchplan.ReportSimulatedCrash(log, "--simulate-crash")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	log.Info("keeping the container alive since --keep-after-failure is set", "exit", 2)
	for s := range sigs {
		log.Info("signal for the launcher, which is gone: nothing to stop", "signal", s.String())
	}
}

// startTimedOut is upstream's waitForDomainUUID timeout: a launcher whose
// domain never ran within --qemu-timeout panics (exit 2).
func (m *Monitor) startTimedOut() {
	m.mu.Lock()
	ran := m.everRunning || m.ended || m.deleteWanted
	m.mu.Unlock()
	if !ran {
		panic(fmt.Errorf("timed out waiting for domain to be defined"))
	}
}

// stopOnSignal is the pod's deletion: mark the graceful shutdown, press
// the power button, kill the domain when --grace-period-seconds is over,
// and exit once the domain is gone (0), as upstream's process monitor.
func (m *Monitor) stopOnSignal(sigs <-chan os.Signal) int {
	m.mu.Lock()
	idle := m.cur == nil
	m.mu.Unlock()
	if idle {
		return 0
	}
	_ = m.Shutdown()
	grace := time.NewTimer(m.f.GracePeriod())
	defer grace.Stop()
	for {
		m.mu.Lock()
		gone, wait := m.cur == nil, m.changed
		m.mu.Unlock()
		if gone {
			return 0
		}
		select {
		case <-wait:
		case <-sigs:
		case <-grace.C:
			m.log.Info("grace period expired, killing the domain")
			_ = m.Kill()
		case code := <-m.exit:
			return code
		}
	}
}

// stopServer stops srv gracefully, or at once after a second.
func stopServer(srv *grpc.Server) {
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		srv.Stop()
	}
}

// reap waits for every child and orphan; our launcher's exit status goes
// to its follower.
func (m *Monitor) reap() {
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc, syscall.SIGCHLD)
	for range sigc {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			m.mu.Lock()
			c := m.children[pid]
			m.mu.Unlock()
			if c != nil {
				c.exited <- ws
			}
		}
	}
}
