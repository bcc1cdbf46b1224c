package hooksidecar

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"kubevirt.io/kubevirt/pkg/hooks"
)

// The environment that tells a re-executed program what it is.
const (
	isolatedEnv = "CRASHLOOP_HOOKS_ISOLATED"
	execFlag    = "--crashloop-hook-sidecar-exec"
)

// stopGrace is how long a sidecar has to exit after SIGTERM.
const stopGrace = 5 * time.Second

// Init is the first call in the main of a program that runs sidecars: in
// the process Start re-executes as a sidecar it binds the sidecar's socket
// folder at /var/run/kubevirt-hooks and execs the sidecar's program (it
// does not return); elsewhere it returns at once.
func Init() {
	if len(os.Args) < 5 || os.Args[1] != execFlag {
		return
	}
	sockets, pathDir, exe := os.Args[2], os.Args[3], os.Args[4]
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "hook sidecar %s: %v\n", filepath.Base(sockets), err)
		os.Exit(125)
	}
	if err := bind(sockets, hooks.HookSocketsSharedDirectory); err != nil {
		fail(err)
	}
	env := []string{"PATH=" + pathDir + ":" + os.Getenv("PATH"), hooks.ContainerNameEnvVar + "=" + filepath.Base(sockets)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, hooks.ContainerNameEnvVar+"=") && !strings.HasPrefix(kv, isolatedEnv+"=") {
			env = append(env, kv)
		}
	}
	fail(syscall.Exec(exe, append([]string{exe}, os.Args[5:]...), env))
}

// Isolate re-executes the calling program in a mount namespace of its own
// (root is needed) and exits with its status; in the re-executed program
// it returns at once. Call it before anything else in main, after Init.
func Isolate() {
	if os.Getenv(isolatedEnv) == "1" {
		return
	}
	self, err := os.Executable()
	if err == nil {
		cmd := exec.Command(self, os.Args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), isolatedEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		err = cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: hook sidecars run in a mount namespace of their own, which needs root: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(2)
	}
	os.Exit(0)
}

// UseSocketsDir makes dir the /var/run/kubevirt-hooks of this process (one
// that Isolate re-executed): what KubeVirt's hook manager reads.
func UseSocketsDir(dir string) error {
	if os.Getenv(isolatedEnv) != "1" {
		return errors.New("the sockets folder is bound only in a process that Isolate re-executed")
	}
	return bind(dir, hooks.HookSocketsSharedDirectory)
}

// bind mounts dir at target, inside this process's own mount namespace.
// A missing target's parent gets a tmpfs first, so that nothing is made on
// the host.
func bind(dir, target string) error {
	if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
		parent, err := filepath.EvalSymlinks(filepath.Dir(target))
		if err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", parent, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting a tmpfs at %s: %w", parent, err)
		}
		if err := os.Mkdir(target, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount(dir, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s at %s: %w", dir, target, err)
	}
	return nil
}

// Running are the started sidecars of one launch.
type Running struct {
	procs []*proc
	// Exited receives the first sidecar that ends before Stop, as an error
	// naming it, its image and the tail of its output.
	Exited chan error
}

type proc struct {
	spec Spec
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
}

// Start starts the sidecars, each in a mount namespace of its own whose
// /var/run/kubevirt-hooks is socketsDir/NAME, with its programs and
// ConfigMap scripts (written under workDir/NAME) first on $PATH: the
// running program, re-executed, binds that folder and execs the
// sidecar's entrypoint (Init).
func Start(specs []Spec, socketsDir, workDir string) (*Running, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r := &Running{Exited: make(chan error, len(specs))}
	for _, s := range specs {
		p, err := start(self, s, socketsDir, workDir)
		if err != nil {
			r.Stop()
			return nil, fmt.Errorf("annotation %s: sidecar %d (%s, image %q): %w", Annotation, s.Index, s.Name, s.Image, err)
		}
		r.procs = append(r.procs, p)
		go func() {
			err := p.cmd.Wait()
			close(p.done)
			r.Exited <- fmt.Errorf("annotation %s: sidecar %d (%s, image %q) exited before the domain was rewritten: %v: %s", Annotation, s.Index, s.Name, s.Image, err, p.out.tail())
		}()
	}
	return r, nil
}

func start(self string, s Spec, socketsDir, workDir string) (*proc, error) {
	sock := filepath.Join(socketsDir, s.Name)
	bin := filepath.Join(workDir, s.Name, "bin")
	for _, d := range []string{sock, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for name, file := range s.Bins {
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("its program %s: %w (build it with `make kubevirtmode`)", name, err)
		}
		if err := os.Symlink(file, filepath.Join(bin, name)); err != nil {
			return nil, err
		}
	}
	for name, script := range s.Scripts {
		// A ConfigMap volume's DefaultMode in virt-controller's template: 0755.
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(s.Exe); err != nil {
		return nil, fmt.Errorf("its entrypoint: %w (build it with `make kubevirtmode`)", err)
	}
	p := &proc{spec: s, out: &tailBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(self, append([]string{execFlag, sock, bin, s.Exe}, s.Args...)...)
	p.cmd.Dir = filepath.Join(workDir, s.Name)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// Ready waits, in a process whose /var/run/kubevirt-hooks is the sockets
// folder (UseSocketsDir), until every sidecar accepts connections on a
// socket in its folder, or one exits (its error, as Exited), or timeout passes. KubeVirt's
// Collect looks once a second; with the sockets there already its first
// look finds them all.
func (r *Running) Ready(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, p := range r.procs {
		for !p.serving() {
			select {
			case <-p.done:
				return <-r.Exited
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("annotation %s: sidecar %d (%s, image %q) serves no socket after %v", Annotation, p.spec.Index, p.spec.Name, p.spec.Image, timeout)
			}
		}
	}
	return nil
}

// serving tells whether a socket in the sidecar's folder accepts a
// connection. It is dialled where KubeVirt's manager dials it, below
// /var/run/kubevirt-hooks (UseSocketsDir): a socket's path must fit the
// 108 bytes of a UNIX address, which the folder's own path may not.
func (p *proc) serving() bool {
	dir := filepath.Join(hooks.HookSocketsSharedDirectory, p.spec.Name)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if c, err := net.Dial("unix", filepath.Join(dir, e.Name())); err == nil {
			_ = c.Close()
			return true
		}
	}
	return false
}

// Stop ends every sidecar by its PID: SIGTERM (the shim stops serving and
// removes its socket), SIGKILL after stopGrace, and waits for each.
func (r *Running) Stop() {
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(stopGrace)
	for _, p := range r.procs {
		select {
		case <-p.done:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	r.procs = nil
}

// PIDs are the sidecars' process IDs, for tests.
func (r *Running) PIDs() []int {
	var pids []int
	for _, p := range r.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// tailBuffer keeps the last 4 KiB a sidecar wrote.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	return len(b), nil
}

func (t *tailBuffer) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil))), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}
