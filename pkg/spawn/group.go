package spawn

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// GroupMembers lists the live (not zombie) processes of process group
// pgid, from /proc: what a stop must leave empty.
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
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold anything but ")".
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// WaitGroupGone waits up to d for process group pgid to have no live
// member (a process killed a moment ago may still be exiting) and returns
// the members left.
func WaitGroupGone(pgid int, d time.Duration) ([]int, error) {
	deadline := time.Now().Add(d)
	for {
		m, err := GroupMembers(pgid)
		if err != nil || len(m) == 0 || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
