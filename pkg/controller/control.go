package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// Request is one command sent to a running controller over its control
// socket (one JSON object per connection).
type Request struct {
	// Op is "stop", "start", "restart", "status", "list" or "stats".
	Op string `json:"op"`
	// VM is "name" or "namespace/name"; unused by "list".
	VM string `json:"vm,omitempty"`
}

// Response is the controller's answer to a Request.
type Response struct {
	// OK is false when the operation was refused or failed.
	OK bool `json:"ok"`
	// Error says why, naming the VM and the allowed alternatives.
	Error string `json:"error,omitempty"`
	// NotFound is set when the VM is not managed by the controller.
	NotFound bool `json:"notFound,omitempty"`
	// Message describes what was done.
	Message string `json:"message,omitempty"`
	// VMs holds the VM's state after the operation (all VMs for "list").
	VMs []*Snapshot `json:"vms,omitempty"`
	// Stats is the controller process's own counts (for "stats").
	Stats *ProcessStats `json:"stats,omitempty"`
}

// ProcessStats is what the controller process holds, for checking that a
// long run gives back what it took: after every VM has stopped, the
// goroutines and open file descriptors are back to where they started.
type ProcessStats struct {
	// Goroutines is runtime.NumGoroutine().
	Goroutines int `json:"goroutines"`
	// OpenFDs counts /proc/self/fd (-1 when it cannot be read).
	OpenFDs int `json:"openFDs"`
	// VMs is the number of VMs managed.
	VMs int `json:"vms"`
	// LiveLaunchers is the number of VMs with a launcher the controller
	// is watching.
	LiveLaunchers int `json:"liveLaunchers"`
}

// ErrNoController means no controller answers on the state folder's
// control socket.
var ErrNoController = errors.New("no virt-controller is running on this state folder")

// serve answers control requests until ctx ends or ln is closed.
func (c *Controller) serve(ctx context.Context, ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go c.serveConn(ctx, conn)
	}
}

func (c *Controller) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req Request
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		_ = json.NewEncoder(conn).Encode(Response{Error: fmt.Sprintf("bad request: %v", err)})
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	resp := c.answer(ctx, req)
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = json.NewEncoder(conn).Encode(resp)
}

func (c *Controller) answer(ctx context.Context, req Request) Response {
	switch req.Op {
	case "list":
		return Response{OK: true, VMs: c.Snapshots()}
	case "stats":
		return Response{OK: true, Stats: c.stats()}
	}
	k, err := ParseKey(req.VM)
	if err != nil {
		return Response{Error: err.Error()}
	}
	if req.Op == "status" {
		w, err := c.worker(k)
		if err != nil {
			return Response{Error: err.Error(), NotFound: true}
		}
		return Response{OK: true, VMs: []*Snapshot{w.snap.Load()}}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	snap, msg, err := c.Do(ctx, req.Op, k)
	if err != nil {
		return Response{Error: err.Error(), NotFound: errors.Is(err, errNotFound), VMs: snaps(snap)}
	}
	return Response{OK: true, Message: msg, VMs: snaps(snap)}
}

func snaps(s *Snapshot) []*Snapshot {
	if s == nil {
		return nil
	}
	return []*Snapshot{s}
}

// Call sends req to the controller running on stateDir. It returns an
// error wrapping ErrNoController when none answers.
func Call(ctx context.Context, stateDir string, req Request) (*Response, error) {
	path := filepath.Join(stateDir, "control.sock")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("%w (%s: %v)", ErrNoController, path, err)
		}
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("sending %s to controller: %w", req.Op, err)
	}
	var resp Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return nil, fmt.Errorf("reading controller's answer to %s: %w", req.Op, err)
	}
	return &resp, nil
}

// ReadSnapshots reads VM state straight from a state folder, for status
// queries when no controller is running. With no keys it reads every VM.
func ReadSnapshots(stateDir string, keys ...Key) ([]*Snapshot, error) {
	store, err := OpenStoreReadOnly(stateDir)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		if keys, err = store.List(); err != nil {
			return nil, err
		}
	}
	var out []*Snapshot
	for _, k := range keys {
		rec, err := store.Load(k)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			known, _ := store.List()
			return nil, fmt.Errorf("%w: no state for VM %s in %s (known: %s)", errNotFound, k, stateDir, keyList(known))
		}
		s := &Snapshot{VM: rec.VM, VMI: rec.VMI, Attempt: rec.Attempt, RetryAfter: rec.RetryAfter,
			Delay: rec.Delay, ScaledDelay: rec.ScaledDelay, GaveUp: rec.History.GaveUp, TimeScale: rec.TimeScale}
		if rec.Launcher != nil {
			s.LauncherDir = rec.Launcher.Dir
			if rec.Launcher.Alive() {
				s.LauncherPID = rec.Launcher.PID
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// IsNotFound reports whether err means an unknown VM.
func IsNotFound(err error) bool { return errors.Is(err, errNotFound) }

func keyList(keys []Key) string {
	if len(keys) == 0 {
		return "none"
	}
	s := ""
	for i, k := range keys {
		if i == 8 {
			return s + fmt.Sprintf(", and %d more", len(keys)-8)
		}
		if i > 0 {
			s += ", "
		}
		s += k.String()
	}
	return s
}

// stats counts what the process holds now. The goroutine serving the
// request is counted too, the same at every call.
func (c *Controller) stats() *ProcessStats {
	st := &ProcessStats{Goroutines: runtime.NumGoroutine(), OpenFDs: -1}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		st.OpenFDs = len(fds) - 1 // the ReadDir's own descriptor
	}
	for _, s := range c.Snapshots() {
		st.VMs++
		if s.LauncherPID != 0 {
			st.LiveLaunchers++
		}
	}
	return st
}
