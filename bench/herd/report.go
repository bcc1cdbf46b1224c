package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

// cpuText lists the CPU seconds of each component of a run.
func cpuText(ds []cpuDelta) string {
	var parts []string
	for _, d := range ds {
		switch {
		case d.Gone:
			parts = append(parts, d.Name+" (restarted: not measured)")
		case d.Children >= 0.05:
			parts = append(parts, fmt.Sprintf("%s %.1f + its reaped children (launchers) %.1f", d.Name, d.Self, d.Children))
		default:
			parts = append(parts, fmt.Sprintf("%s %.1f", d.Name, d.Self))
		}
	}
	return strings.Join(parts, ", ")
}

// stepsText lists the wall clock's jumps of a run.
func stepsText(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ds))
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%+.1f s", d.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// writeHerdTable writes the herd's Markdown table, one row per run, then
// each KubeVirt run's busiest request kinds.
func writeHerdTable(w io.Writer, rs []result) {
	sortResults(rs)
	fmt.Fprintln(w, "| VMs | controller | minutes | VMIs created | counted failures | max count | retries measured (pending) | lateness p50 | p99 | max | retries per 10 s: CV, peak | API requests/s | writes/s (ours: state saves) | etcd DB growth | CPU seconds | wall-clock steps |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		req, etcd := "none (no API server)", "-"
		if r.Controller == "kubevirt" {
			req, etcd = fmt.Sprintf("%.2f", r.Requests), fmt.Sprintf("%.1f MiB", r.EtcdGrowthBytes/(1<<20))
		}
		fmt.Fprintf(w, "| %d | %s | %.1f | %d | %d | %d | %d (%d) | %s | %s | %s | %.2f, %d | %s | %.2f | %s | %s | %s |\n",
			r.VMs, r.Controller, r.Duration.Minutes(), r.VMIs, r.Failures, r.MaxCount, len(r.Retries), r.Pending,
			ms(r.Lateness.P50), ms(r.Lateness.P99), ms(r.Lateness.Max), r.Spread.CV, r.Spread.Peak,
			req, r.Writes, etcd, cpuText(r.CPU), stepsText(r.ClockSteps))
	}
	for _, r := range rs {
		if len(r.Rates) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nKubeVirt, %d VMs: requests per second by verb and resource (largest first): ", r.VMs)
		var parts []string
		for i, rt := range r.Rates {
			if i == 12 {
				parts = append(parts, fmt.Sprintf("and %d more", len(r.Rates)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", rt.Key, rt.PerSec))
		}
		fmt.Fprintln(w, strings.Join(parts, ", "))
	}
	for _, r := range rs {
		fmt.Fprintf(w, "\nRetries per 10 s, %s, %d VMs: %v\n", r.Controller, r.VMs, r.Spread.Counts)
	}
}

// writeStormTable writes the restart storm's table.
func writeStormTable(w io.Writer, rs []result) {
	sortResults(rs)
	fmt.Fprintln(w, "| controller | VMs | minutes | VMIs created/min | pods (launchers) created/min | restarts/min per VM | API writes/min (ours: state saves/min) | API requests/min | CrashLoopBackOff shown | counted failures | max count | wall-clock steps |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		m := r.Duration.Minutes()
		req := "none (no API server)"
		if r.Controller == "kubevirt" {
			req = fmt.Sprintf("%.0f", r.Requests*60)
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %.2f | %.0f | %s | %v | %d | %d | %s |\n",
			r.Controller, r.VMs, m, float64(r.VMIs)/m, float64(r.Pods)/m, float64(r.VMIs-r.VMs)/m/float64(r.VMs),
			r.Writes*60, req, r.CrashLoop, r.Failures, r.MaxCount, stepsText(r.ClockSteps))
	}
}

// sortResults orders runs by herd size, then controller.
func sortResults(rs []result) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].VMs != rs[j].VMs {
			return rs[i].VMs < rs[j].VMs
		}
		return rs[i].Controller < rs[j].Controller
	})
}
