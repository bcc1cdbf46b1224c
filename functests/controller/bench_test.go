package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// BenchmarkCrashLoop1000 runs many VMs (1000 by default) crash-looping
// through real `virt-launcher --simulate-crash` processes under one real
// virt-controller at a compressed time scale, and prints a table: the
// controller's CPU time and RSS, and how late retries fire against their
// planned time. Run it alone:
//
//	go test ./functests/controller -run '^$' -bench CrashLoop1000 -benchtime 1x -timeout 30m
//
// CRASHLOOP_BENCH_VMS, CRASHLOOP_BENCH_SCALE (default 0.2) and
// CRASHLOOP_BENCH_DURATION (default 60s) change the run; with -short (the
// smoke run of `make bench-smoke`) the defaults are 5 VMs for 4s, which
// checks in seconds that the benchmark still runs end to end;
// it runs the binaries of `make build` (CRASHLOOP_BIN_DIR takes them from
// another folder); CRASHLOOP_BENCH_FSYNC=false
// turns off fsync of state saves; CRASHLOOP_BENCH_LAUNCHER_NICE (default 0,
// the controller's default) sets --launcher-nice.
func BenchmarkCrashLoop1000(b *testing.B) {
	defVMs, defDuration := 1000, "60s"
	if testing.Short() {
		defVMs, defDuration = 5, "4s"
	}
	vms := envInt("CRASHLOOP_BENCH_VMS", defVMs)
	scale := envString("CRASHLOOP_BENCH_SCALE", "0.2")
	duration, err := time.ParseDuration(envString("CRASHLOOP_BENCH_DURATION", defDuration))
	if err != nil {
		b.Fatalf("CRASHLOOP_BENCH_DURATION: %v", err)
	}
	fsync := envString("CRASHLOOP_BENCH_FSYNC", "true")
	nice := envString("CRASHLOOP_BENCH_LAUNCHER_NICE", "0")
	built, err := ctlharness.Built()
	if err != nil {
		b.Fatal(err)
	}
	binDir := filepath.Dir(built.Controller)
	b.ResetTimer()
	for range b.N {
		r, err := runBench(binDir, b.TempDir(), vms, scale, fsync, nice, duration)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Print(r.table())
		b.ReportMetric(r.cpuSeconds, "ctrl-cpu-s")
		b.ReportMetric(r.rssPeakMB, "ctrl-rss-peak-MB")
		b.ReportMetric(float64(r.decision.p99)/1e6, "late-p99-ms")
	}
}

// benchResult is what one run measured.
type benchResult struct {
	vms                     int
	scale, fsync, nice      string
	duration                time.Duration
	launches, retries, fail int
	cpuSeconds, rssPeakMB   float64
	rssEndMB                float64
	threadsPeak             int
	decision                percentiles
	// toRunning is planned retry time -> the launcher's own first log line
	// (a --simulate-crash launcher never reaches its Running event: its
	// first line is when its code runs).
	toRunning percentiles
	// before and after are the controller's own counts with every VM
	// halted, before the run and once the run's VMs are halted again.
	before, after      controller.ProcessStats
	leftLaunchers      int
	leftRuntimeEntries int
}

type percentiles struct{ p50, p90, p99, max time.Duration }

func (r benchResult) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| VMs | time scale | fsync | launcher nice | run | launches | retries measured | exits | controller CPU | CPU share of one core | RSS peak | RSS end | threads peak |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %d | %d | %d | %.1f s | %.0f%% | %.1f MB | %.1f MB | %d |\n\n",
		r.vms, r.scale, r.fsync, r.nice, r.duration, r.launches, r.retries, r.fail, r.cpuSeconds,
		100*r.cpuSeconds/r.duration.Seconds(), r.rssPeakMB, r.rssEndMB, r.threadsPeak)
	fmt.Fprintf(&b, "| retry lateness vs planned time | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		p    percentiles
	}{{"timer fired -> launch decided (latenessNs)", r.decision},
		{"plan -> launcher running (its first log line)", r.toRunning}} {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.name, ms(row.p.p50), ms(row.p.p90), ms(row.p.p99), ms(row.p.max))
	}
	fmt.Fprintf(&b, "\ncontroller with every VM halted, before the run / after it: %d / %d goroutines, %d / %d open fds; left after its exit: %d launcher processes, %d entries in the launchers' runtime folder\n",
		r.before.Goroutines, r.after.Goroutines, r.before.OpenFDs, r.after.OpenFDs, r.leftLaunchers, r.leftRuntimeEntries)
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func runBench(binDir, dir string, vms int, scale, fsync, nice string, duration time.Duration) (benchResult, error) {
	r := benchResult{vms: vms, scale: scale, fsync: fsync, nice: nice, duration: duration}
	manifest := filepath.Join(dir, "vms.yaml")
	// The VMs start Halted, so that the controller's goroutines and open
	// descriptors are counted before any launcher, then run, then are
	// halted again and counted once more.
	if err := writeBenchManifest(manifest, vms, v1.RunStrategyHalted); err != nil {
		return r, err
	}
	out, err := os.Create(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return r, err
	}
	defer out.Close()
	errf, err := os.Create(filepath.Join(dir, "controller.stderr"))
	if err != nil {
		return r, err
	}
	defer errf.Close()
	state := filepath.Join(dir, "state")
	cmd := exec.Command(filepath.Join(binDir, "virt-controller"), "run", "-o", "json",
		"--state-dir", state, "--seed", "1", "--time-scale", scale, "--fsync="+fsync, "--launcher-nice", nice,
		"--launcher", filepath.Join(binDir, "virt-launcher"), "--launcher-arg=--simulate-crash",
		"--launcher-arg=--runtime-dir="+filepath.Join(dir, "run"), manifest)
	cmd.Stdout, cmd.Stderr = out, errf
	if err := cmd.Start(); err != nil {
		return r, err
	}
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var exited error
	stop := sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case exited = <-done:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			exited = <-done
		}
	})
	defer stop()
	before, err := waitStats(state, done, time.Minute, func(s *controller.ProcessStats) bool { return s.VMs == vms && s.LiveLaunchers == 0 })
	if err != nil {
		return r, fmt.Errorf("before the run: %w (see %s)", err, errf.Name())
	}
	r.before = *before
	if err := writeBenchManifest(manifest, vms, v1.RunStrategyAlways); err != nil {
		return r, err
	}
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		select {
		case err := <-done:
			done <- err // for stop
			return r, fmt.Errorf("controller exited early: %v (see %s)", err, errf.Name())
		case <-time.After(250 * time.Millisecond):
		}
		if rss, hwm, threads, err := procMem(pid); err == nil {
			r.rssPeakMB = max(r.rssPeakMB, hwm, rss)
			r.rssEndMB = rss
			r.threadsPeak = max(r.threadsPeak, threads)
		}
		if cpu, err := procCPU(pid); err == nil {
			r.cpuSeconds = cpu
		}
	}
	if err := writeBenchManifest(manifest, vms, v1.RunStrategyHalted); err != nil {
		return r, err
	}
	// Every launcher gone, then the watchers' goroutines wind down.
	if _, err := waitStats(state, done, 2*time.Minute, func(s *controller.ProcessStats) bool { return s.LiveLaunchers == 0 }); err != nil {
		return r, fmt.Errorf("halting the VMs: %w (see %s)", err, errf.Name())
	}
	after, err := waitStats(state, done, 10*time.Second, func(s *controller.ProcessStats) bool {
		return s.Goroutines <= before.Goroutines && s.OpenFDs <= before.OpenFDs
	})
	if after == nil {
		return r, fmt.Errorf("after the run: %w (see %s)", err, errf.Name())
	}
	r.after = *after
	leaked := err
	stop()
	if exited != nil {
		return r, fmt.Errorf("controller's exit after SIGTERM: %v (see %s)", exited, errf.Name())
	}
	r.leftLaunchers = countProcs(filepath.Join(binDir, "virt-launcher"))
	if entries, err := os.ReadDir(filepath.Join(dir, "run")); err == nil {
		r.leftRuntimeEntries = len(entries)
	}
	if leaked != nil {
		return r, fmt.Errorf("the controller did not give back what the run took: %d goroutines and %d open fds before, %d and %d after", before.Goroutines, before.OpenFDs, after.Goroutines, after.OpenFDs)
	}
	firstLog := launcherStarts(filepath.Join(dir, "state", "launchers"))
	var decision, toRunning []time.Duration
	f, err := os.Open(out.Name())
	if err != nil {
		return r, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e controller.Event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Event {
		case "Started":
			r.launches++
			if e.LatenessNs != nil && e.PlannedAt != nil && !e.Time.After(end) {
				r.retries++
				decision = append(decision, time.Duration(*e.LatenessNs))
				if at, ok := firstLog[e.VMIUID]; ok {
					toRunning = append(toRunning, at.Sub(*e.PlannedAt))
				}
			}
		case "Exited":
			r.fail++
		}
	}
	r.decision, r.toRunning = pct(decision), pct(toRunning)
	if r.leftLaunchers > 0 || r.leftRuntimeEntries > 0 {
		return r, fmt.Errorf("left after the controller exited: %d launcher processes, %d entries in %s", r.leftLaunchers, r.leftRuntimeEntries, filepath.Join(dir, "run"))
	}
	return r, nil
}

// launcherStarts maps each VMI UID to the time of the first line in its
// launcher's log (slog text: time=RFC 3339 with milliseconds), from the
// launch folders state/launchers/<vm>/<attempt>-<uid>/launcher.log.
func launcherStarts(launchers string) map[string]time.Time {
	out := map[string]time.Time{}
	logs, _ := filepath.Glob(filepath.Join(launchers, "*", "*", "launcher.log"))
	for _, l := range logs {
		_, uid, ok := strings.Cut(filepath.Base(filepath.Dir(l)), "-")
		if !ok {
			continue
		}
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if v, ok := strings.CutPrefix(line, "time="); ok {
			if at, err := time.Parse(time.RFC3339Nano, strings.Fields(v)[0]); err == nil {
				out[uid] = at
			}
		}
	}
	return out
}

// countProcs counts live processes running the binary at path.
func countProcs(path string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			n++
		}
	}
	return n
}

// writeBenchManifest writes vms test-guest VMs under one run strategy as
// one multi-document file; the controller picks up a rewrite.
func writeBenchManifest(path string, vms int, strategy v1.VirtualMachineRunStrategy) error {
	docs := make([]string, 0, vms)
	for i := range vms {
		doc, err := benchManifest(fmt.Sprintf("vm-%04d", i), strategy)
		if err != nil {
			return err
		}
		docs = append(docs, doc)
	}
	// Written beside and renamed, so the controller never reads half.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// waitStats asks the controller on state for its counts until ok holds or
// the timeout passes; it returns the last counts read and, on timeout, an
// error saying so.
func waitStats(state string, done chan error, timeout time.Duration, ok func(*controller.ProcessStats) bool) (*controller.ProcessStats, error) {
	deadline := time.Now().Add(timeout)
	var last *controller.ProcessStats
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := controller.Call(ctx, state, controller.Request{Op: "stats"})
		cancel()
		switch {
		case err != nil:
			lastErr = err
		case !resp.OK || resp.Stats == nil:
			lastErr = fmt.Errorf("stats refused: %s", resp.Error)
		default:
			last, lastErr = resp.Stats, nil
			if ok(last) {
				return last, nil
			}
		}
		if time.Now().After(deadline) {
			if lastErr == nil {
				lastErr = fmt.Errorf("last counts %+v", *last)
			}
			return last, fmt.Errorf("not reached within %s: %w", timeout, lastErr)
		}
		select {
		case err := <-done:
			done <- err // for the caller's stop
			return last, fmt.Errorf("controller exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// benchManifest renders the test-guest VM (testguest.VM) as
// YAML. It returns the error rather than asserting with gomega, which has
// no fail handler outside a ginkgo suite: a benchmark is a plain testing.B.
func benchManifest(name string, strategy v1.VirtualMachineRunStrategy) (string, error) {
	return testguest.Manifest(testguest.VM(name, strategy, nil, ""))
}

func pct(ds []time.Duration) percentiles {
	if len(ds) == 0 {
		return percentiles{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return percentiles{p50: at(0.50), p90: at(0.90), p99: at(0.99), max: ds[len(ds)-1]}
}

// procCPU is the process's own user+system CPU time (not its children's).
func procCPU(pid int) (float64, error) {
	st, err := procfs.ReadStat(pid)
	return st.CPUSeconds(), err
}

// procMem reads VmRSS, VmHWM (MB) and the thread count.
func procMem(pid int) (rss, hwm float64, threads int, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseFloat(fs[0], 64)
		switch k {
		case "VmRSS":
			rss = n / 1024
		case "VmHWM":
			hwm = n / 1024
		case "Threads":
			threads = int(n)
		}
	}
	return rss, hwm, threads, nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
