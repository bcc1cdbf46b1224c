// Package spawn is the one supervisor of child processes: the local
// controller's launchers, the node agent's launchers, cluster-lite's etcd,
// kube-apiserver and KubeVirt components, and the functional suites'
// controllers and stacks.
//
// A child (Spec, Process) runs in its own process group, so a terminal's
// Ctrl-C does not reach it, with its output in files or given writers.
// Stop ends it with SIGTERM (through os/exec's Cmd.Cancel), a grace period
// and SIGKILL, for its group too when asked; Exit decodes how it ended (an
// exit code, or a signal as 128+n with the signal's name); Tail reads the
// end of its log for messages.
//
// A child started by Start outlives this process (a launcher outlives its
// controller, as a pod does). One started by a Spawner dies with it: the
// kernel delivers a child's parent-death signal (Pdeathsig) when the
// thread that forked it exits, not when the process does, and the Go
// runtime may end threads, so a Spawner forks every child from one
// goroutine locked to its own OS thread, and Pdeathsig follows the life of
// the Spawner (and of the process), whichever goroutine asks.
package spawn

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
)

// Spawner starts commands from one locked OS thread. Its methods are safe
// for concurrent use.
type Spawner struct {
	reqs chan request
	quit chan struct{}
	done chan struct{}
	// tid is the thread's id (set before the first request is served).
	tid int
}

// request asks the spawner to run fn on its thread and to send the result
// to reply.
type request struct {
	fn    func() error
	reply chan error
}

// New starts a Spawner's goroutine and thread.
func New() *Spawner {
	s, _ := newSpawner(nil)
	return s
}

// newSpawner starts the goroutine and thread, runs setup on that thread
// first, and returns its error (with the thread ended) if it fails.
func newSpawner(setup func() error) (*Spawner, error) {
	s := &Spawner{reqs: make(chan request), quit: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go s.loop(setup, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// loop serves requests until Close. It returns with its thread still
// locked, so the runtime ends that thread; by then the owner has stopped
// its children, and the parent-death signal only reaches stragglers. A
// thread that setup changed (a network namespace of its own) thus never
// runs another goroutine.
func (s *Spawner) loop(setup func() error, ready chan<- error) {
	runtime.LockOSThread()
	if syscall.Gettid() == syscall.Getpid() {
		// The process's main thread, which the runtime never ends (it would
		// keep setup's change, and /proc/self shows it): hand over to a
		// goroutine that cannot run here while this one holds the thread.
		inner := make(chan error, 1)
		go s.loop(setup, inner)
		err := <-inner
		runtime.UnlockOSThread()
		ready <- err
		return
	}
	defer close(s.done)
	s.tid = syscall.Gettid()
	if setup != nil {
		if err := setup(); err != nil {
			ready <- err
			return
		}
	}
	ready <- nil
	for {
		select {
		case r := <-s.reqs:
			r.reply <- r.fn()
		case <-s.quit:
			return
		}
	}
}

// Start starts spec's program on the spawner's thread, in its own process
// group, with SIGKILL as its parent-death signal: it dies with the spawner
// (and with this process).
func (s *Spawner) Start(spec Spec) (*Process, error) { return start(spec, true, s.startCmd) }

// startCmd starts cmd (as cmd.Start does) on the spawner's thread.
func (s *Spawner) startCmd(cmd *exec.Cmd) error { return s.Do(cmd.Start) }

// Do runs fn on the spawner's thread and returns its error. fn must not
// unlock the thread (runtime.UnlockOSThread) and should return soon: the
// spawner serves one request at a time.
func (s *Spawner) Do(fn func() error) error {
	reply := make(chan error, 1)
	select {
	case s.reqs <- request{fn: fn, reply: reply}:
	case <-s.quit:
		return errors.New("spawner closed")
	}
	return <-reply
}

// Close ends the spawner's goroutine and with it its thread (never the
// process's main thread, which the runtime keeps), so that the
// parent-death signal reaches children still alive. Owners stop their
// children before Close.
func (s *Spawner) Close() {
	close(s.quit)
	<-s.done
}
