package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the kernel's clock tick for /proc times (USER_HZ, 100 on Linux).
const userHZ = 100

// cpuTimes are a process's CPU seconds from /proc/PID/stat: its own, and
// those of its children it has waited for.
type cpuTimes struct {
	Self, Children float64
}

// readCPU reads /proc/PID/stat. The command name may hold spaces and
// parentheses, so fields are counted from the last ')'.
func readCPU(pid int) (cpuTimes, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTimes{}, fmt.Errorf("reading CPU of process %d: %w", pid, err)
	}
	return parseStat(string(data))
}

// parseStat parses the text of /proc/PID/stat.
func parseStat(s string) (cpuTimes, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return cpuTimes{}, fmt.Errorf("/proc stat %q: no ')' after the command name", s)
	}
	f := strings.Fields(s[i+1:])
	// After the name: state(3) ... utime(14) stime(15) cutime(16) cstime(17).
	if len(f) < 15 {
		return cpuTimes{}, fmt.Errorf("/proc stat: %d fields after the command name, want at least 15", len(f))
	}
	var v [4]float64
	for k := range v {
		n, err := strconv.ParseFloat(f[11+k], 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc stat field %d %q: %w", 14+k, f[11+k], err)
		}
		v[k] = n / userHZ
	}
	return cpuTimes{Self: v[0] + v[1], Children: v[2] + v[3]}, nil
}

// component is one process whose CPU the bench reports.
type component struct {
	Name string
	PID  int
}

// componentsOf names the processes in pids by their executable's base
// name (etcd, kube-apiserver, virt-api, virt-controller, ...).
func componentsOf(pids []int) []component {
	var out []component
	for _, pid := range pids {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		out = append(out, component{Name: filepath.Base(exe), PID: pid})
	}
	return out
}

// cpuDelta is the CPU each component used between two readings; a
// process that was gone by the second reading is reported as such.
type cpuDelta struct {
	Name     string
	Self     float64
	Children float64
	Gone     bool
}

// sampleCPU reads every component's CPU.
func sampleCPU(cs []component) map[int]cpuTimes {
	out := map[int]cpuTimes{}
	for _, c := range cs {
		if t, err := readCPU(c.PID); err == nil {
			out[c.PID] = t
		}
	}
	return out
}

// diffCPU subtracts two samples, per component, in the order of cs.
func diffCPU(cs []component, before, after map[int]cpuTimes) []cpuDelta {
	var out []cpuDelta
	for _, c := range cs {
		b, okB := before[c.PID]
		a, okA := after[c.PID]
		d := cpuDelta{Name: c.Name, Gone: !okA || !okB}
		if !d.Gone {
			d.Self, d.Children = a.Self-b.Self, a.Children-b.Children
		}
		out = append(out, d)
	}
	return out
}
