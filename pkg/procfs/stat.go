// Package procfs reads /proc/PID/stat, the one place in the tree that
// does: a process's state, parent, process group, CPU time and start
// time, as the kernel reports them (proc(5)).
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is the part of /proc/PID/stat the harness uses.
type Stat struct {
	// State is the one-letter state (R, S, D, Z, X, ...).
	State byte
	// PPID is the parent's process id; PGRP the process group.
	PPID, PGRP int
	// UTime and STime are the CPU time spent in user and kernel mode, in
	// clock ticks (USER_HZ, 100 a second on Linux).
	UTime, STime uint64
	// CUTime and CSTime are the same for the children it has waited
	// for, in clock ticks.
	CUTime, CSTime uint64
	// StartTicks is when the process started, in clock ticks since boot:
	// with the PID it tells a process apart from a later one that reused
	// the PID.
	StartTicks uint64
}

// Gone reports a process that has ended (a zombie, or dead).
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// CPUSeconds is the process's own user plus system CPU time.
func (s Stat) CPUSeconds() float64 { return float64(s.UTime+s.STime) / 100 }

// ChildrenCPUSeconds is the user plus system CPU time of the children it
// has waited for.
func (s Stat) ChildrenCPUSeconds() float64 { return float64(s.CUTime+s.CSTime) / 100 }

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	data, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(path, data)
}

// ParseStat decodes the text of a stat file named path (for errors). The
// command name may hold spaces and parentheses, so the fields are read
// after its last ')'.
func ParseStat(path string, data []byte) (Stat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("%s: no ')' after the command name", path)
	}
	// Fields from 3 (state) on; f[k] is field k+3 of proc(5).
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%s: %d fields after the command name, want at least 20", path, len(f))
	}
	st := Stat{State: f[0][0]}
	var errs [7]error
	st.PPID, errs[0] = strconv.Atoi(f[1])
	st.PGRP, errs[1] = strconv.Atoi(f[2])
	st.UTime, errs[2] = strconv.ParseUint(f[11], 10, 64)
	st.STime, errs[3] = strconv.ParseUint(f[12], 10, 64)
	st.CUTime, errs[4] = strconv.ParseUint(f[13], 10, 64)
	st.CSTime, errs[5] = strconv.ParseUint(f[14], 10, 64)
	st.StartTicks, errs[6] = strconv.ParseUint(f[19], 10, 64)
	for _, err := range errs {
		if err != nil {
			return Stat{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	return st, nil
}

// GroupMembers lists the live (not ended) processes of process group
// pgid: what stopping a group must leave empty.
func GroupMembers(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := ReadStat(pid)
		if err != nil || st.Gone() {
			continue // gone meanwhile
		}
		if st.PGRP == pgid {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
