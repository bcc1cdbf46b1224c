package clusterlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Process is a program started next to the control plane by StartProcess,
// such as KubeVirt's virt-controller: in the control plane's network
// namespace and its own process group, killed by the kernel if this
// process dies, its output in StateDir/logs/<name>.log. With Restart it
// is started again, after a backoff, whenever it exits by itself.
type Process struct {
	cp      *ControlPlane
	name    string
	bin     string
	args    []string
	restart *Backoff

	mu      sync.Mutex
	c       *child
	pids    []int
	stopped bool
	// quit is closed by Stop.
	quit chan struct{}
	// done is closed once the process has ended for good: exited without
	// Restart, failed to restart, or stopped.
	done chan struct{}
}

// Backoff is how long a restarted process waits: Initial after its first
// exit, doubled after each further one up to Max, and back to Initial
// once a run has lasted Max.
type Backoff struct {
	Initial, Max time.Duration
}

// ProcessOption changes how StartProcess runs a process.
type ProcessOption func(*Process)

// Restart has the process started again when it exits by itself (not
// through Stop), after b's delay: KubeVirt's virt-controller exits when it
// loses its leader lease and expects to be restarted, as a Deployment
// would.
func Restart(b Backoff) ProcessOption {
	return func(p *Process) { p.restart = &b }
}

// StartProcess starts bin with args as a process of the control plane.
// Stop stops every such process, the latest first, before the API server;
// Process.Stop stops one earlier.
func (cp *ControlPlane) StartProcess(name, bin string, args []string, opts ...ProcessOption) (*Process, error) {
	p := &Process{cp: cp, name: name, bin: bin, args: args, quit: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	if p.restart != nil && (p.restart.Initial <= 0 || p.restart.Max < p.restart.Initial) {
		return nil, fmt.Errorf("start %s: restart backoff %v..%v: want 0 < Initial <= Max", name, p.restart.Initial, p.restart.Max)
	}
	p.mu.Lock()
	err := p.startChild()
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	cp.procsMu.Lock()
	cp.procs = append(cp.procs, p)
	cp.procsMu.Unlock()
	go p.supervise()
	return p, nil
}

// startChild starts one run of the process; p.mu is held.
func (p *Process) startChild() error {
	logPath := filepath.Join(p.cp.cfg.StateDir, "logs", p.name+".log")
	c, err := startChild(p.cp.spawner, p.cp.log, p.name, p.bin, p.args, p.cp.cfg.StateDir, logPath)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.c = c
	p.pids = append(p.pids, c.proc.PID())
	return nil
}

// supervise waits for each run to end and, with Restart, starts the next
// one after the backoff; it closes done when the process ends for good.
func (p *Process) supervise() {
	defer close(p.done)
	clk := p.cp.cfg.Clock
	var delay time.Duration
	for {
		c := p.current()
		began := clk.Now()
		<-c.proc.Done()
		if p.isStopped() {
			return
		}
		c.log.Warn("exited", "err", c.exitError())
		if p.restart == nil {
			return
		}
		switch {
		case delay == 0 || clk.Since(began) >= p.restart.Max:
			delay = p.restart.Initial
		default:
			delay = min(2*delay, p.restart.Max)
		}
		c.log.Info("restarting", "after", delay)
		select {
		case <-clk.After(delay):
		case <-p.quit:
			return
		}
		p.mu.Lock()
		err := error(nil)
		if !p.stopped {
			err = p.startChild()
		}
		stopped := p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		if err != nil {
			c.log.Error("restarting failed", "err", err)
			return
		}
	}
}

func (p *Process) current() *child {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

func (p *Process) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// PID is the process id of the current (or last) run.
func (p *Process) PID() int { return p.current().proc.PID() }

// PIDs lists the process ids of every run so far.
func (p *Process) PIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pids)
}

// Done is closed when the process has ended for good: it exited without
// Restart, could not be restarted, or was stopped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err describes how the last run ended, with the end of its log; nil
// while it runs.
func (p *Process) Err() error {
	c := p.current()
	if !c.proc.Exited() {
		return nil
	}
	return c.exitError()
}

// LogPath is the file that receives the process's output.
func (p *Process) LogPath() string { return p.current().logPath }

// Stop ends restarts, then sends SIGTERM to the current run's process
// group, and SIGKILL after the control plane's StopTimeout or when ctx
// ends. Stopping a process that has already ended is not an error.
func (p *Process) Stop(ctx context.Context) error {
	cp := p.cp
	cp.procsMu.Lock()
	cp.procs = slices.DeleteFunc(cp.procs, func(q *Process) bool { return q == p })
	cp.procsMu.Unlock()
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.quit)
	}
	c := p.c
	p.mu.Unlock()
	var err error
	if !c.proc.Exited() {
		err = c.stop(ctx, cp.cfg.StopTimeout)
	}
	<-p.done
	return err
}
