package qemu

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Children reaps the children of this process: it is a child subreaper (or
// PID 1 of a PID namespace), so QEMU processes that libvirt daemonizes, the
// domain's and the ones libvirt runs to probe QEMU's capabilities, become
// its children when their parent exits. A zombie still counts as alive for
// libvirt, which then waits up to 40 s for it to go; reaping at once lets
// the probe and the domain's clean-up run at their natural speed.
//
// One goroutine peeks at each exited child with waitid(P_ALL, WEXITED|
// WNOWAIT) and then decides: a child someone waits for with Watch (the
// domain's QEMU) is reaped at once and its wait status delivered; a child
// marked Leave (started by os/exec, whose Wait reaps it) is left alone;
// any other child is left for Grace to whoever forked it (libvirt waits
// for its own children by pid) and then reaped. waitid shows one exited
// child at a time, so a child left to os/exec hides the others until its
// Wait, which os/exec's users call at once (Reaper.Done does); watched
// children are still reaped meanwhile.
type Children struct {
	// Grace is how long an exited child nobody watches is left to its
	// own waiter before it is reaped here.
	Grace time.Duration

	mu      sync.Mutex
	leave   map[int]bool
	watch   map[int]chan syscall.WaitStatus
	reaped  map[int]syscall.WaitStatus
	started bool
	// head is the exited child that waitid returns first (it returns the
	// same one until it is reaped) and since when.
	head      int
	headSince time.Time
}

// NewChildren returns a reaper of this process's children; Run starts it.
func NewChildren() *Children {
	return &Children{Grace: 50 * time.Millisecond, leave: map[int]bool{}, watch: map[int]chan syscall.WaitStatus{},
		reaped: map[int]syscall.WaitStatus{}}
}

// Leave marks pid as a child that its starter reaps (os/exec's Wait).
func (c *Children) Leave(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leave[pid] = true
}

// Watch returns a channel that receives pid's wait status once, when it
// is reaped here, even if that happened shortly before the call.
func (c *Children) Watch(pid int) <-chan syscall.WaitStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan syscall.WaitStatus, 1)
	if ws, ok := c.reaped[pid]; ok {
		delete(c.reaped, pid)
		ch <- ws
		return ch
	}
	c.watch[pid] = ch
	return ch
}

// Run reaps until ctx ends, on its own goroutine. It returns at once when
// it runs already.
func (c *Children) Run(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return
	}
	c.started = true
	go c.loop(ctx)
}

// childInfo is the part of siginfo_t that waitid fills for a child, laid
// out as the kernel does on Linux (the size of unix.Siginfo).
type childInfo struct {
	signo, errno, code, _ int32
	pid                   int32
	uid                   uint32
	status                int32
	_                     [100]byte
}

const poll = 5 * time.Millisecond

func (c *Children) loop(ctx context.Context) {
	for ctx.Err() == nil {
		var info childInfo
		err := unix.Waitid(unix.P_ALL, 0, (*unix.Siginfo)(unsafe.Pointer(&info)), unix.WEXITED|unix.WNOWAIT, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: no children yet
			time.Sleep(poll)
			continue
		}
		if !c.handle(int(info.pid)) {
			// The child at the head of the list is not ours to reap
			// (yet); the watched ones behind it must not wait for it.
			c.reapWatched()
			time.Sleep(poll)
		}
	}
}

// handle reaps pid if it is ours to reap now, and says whether it did.
func (c *Children) handle(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leave[pid] {
		return false
	}
	if ch, ok := c.watch[pid]; ok {
		if ws, ok := reapPid(pid); ok {
			delete(c.watch, pid)
			ch <- ws
		}
		return true
	}
	if pid != c.head {
		c.head, c.headSince = pid, time.Now()
		return false
	}
	if time.Since(c.headSince) < c.Grace {
		return false
	}
	c.head = 0
	if ws, ok := reapPid(pid); ok {
		if len(c.reaped) >= 64 {
			clear(c.reaped)
		}
		c.reaped[pid] = ws
	}
	return true
}

func (c *Children) reapWatched() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, ch := range c.watch {
		if ws, ok := reapPid(pid); ok {
			delete(c.watch, pid)
			ch <- ws
		}
	}
}

// reapPid reaps pid if it has exited, without blocking.
func reapPid(pid int) (syscall.WaitStatus, bool) {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return ws, err == nil && got == pid
}

// BecomeSubreaper makes this process inherit its orphaned descendants
// (QEMU daemonized by libvirt), so that Children can reap them.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return errors.New("becoming a child subreaper: " + err.Error())
	}
	return nil
}
