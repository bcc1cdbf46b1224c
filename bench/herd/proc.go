package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// cpuTimes are a process's CPU seconds: its own, and those of its
// children it has waited for.
type cpuTimes struct {
	Self, Children float64
}

// readCPU reads a process's CPU times through procfs.
func readCPU(pid int) (cpuTimes, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return cpuTimes{}, fmt.Errorf("reading CPU of process %d: %w", pid, err)
	}
	return cpuTimes{Self: st.CPUSeconds(), Children: st.ChildrenCPUSeconds()}, nil
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
