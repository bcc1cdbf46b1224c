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
)

// Spawner starts commands from one locked OS thread. Its methods are safe
// for concurrent use.
type Spawner struct {
	reqs chan request
	quit chan struct{}
	done chan struct{}
}

// request asks the spawner to start cmd and to send the result to reply.
type request struct {
	cmd   *exec.Cmd
	reply chan error
}

// New starts a Spawner's goroutine and thread.
func New() *Spawner {
	s := &Spawner{reqs: make(chan request), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// loop serves start requests until Close. It returns with its thread still
// locked, so the runtime ends that thread; by then the owner has stopped
// its children, and the parent-death signal only reaches stragglers.
func (s *Spawner) loop() {
	runtime.LockOSThread()
	defer close(s.done)
	for {
		select {
		case r := <-s.reqs:
			r.reply <- r.cmd.Start()
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
func (s *Spawner) startCmd(cmd *exec.Cmd) error {
	reply := make(chan error, 1)
	select {
	case s.reqs <- request{cmd: cmd, reply: reply}:
	case <-s.quit:
		return errors.New("spawner closed")
	}
	return <-reply
}

// Close ends the spawner's goroutine and with it, as a rule, its thread, so
// that the parent-death signal reaches children still alive (the runtime
// keeps the process's main thread, should the goroutine have run there,
// until the process exits). Owners stop their children before Close.
func (s *Spawner) Close() {
	close(s.quit)
	<-s.done
}
