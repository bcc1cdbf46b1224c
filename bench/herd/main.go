// Command herd measures how KubeVirt v1.6.0's own virt-controller and ours
// keep the crash-loop plan when many VMs fail at once, in real time on
// this machine:
//
//   - herd (the default): N VMs under runStrategy Always whose launchers
//     fail fast (the annotation kubevirt.io/func-test-virt-launcher-fail-fast),
//     on cluster-lite (KubeVirt's controller, our node agent with
//     bare-process launchers) and on our virt-controller with its own
//     state folder. Per retry: the next VMI's creation against the planned
//     status.startFailure.retryAfterTimestamp (p50, p99, max), the retries
//     per 10 s window (coefficient of variation, peak), the API server's
//     requests per second by verb and resource (its /metrics,
//     apiserver_request_total, before and after), etcd's database growth
//     (etcd_mvcc_db_total_size_in_bytes, read inside the stack's network
//     namespace), and the CPU seconds of every component (/proc/PID/stat).
//   - storm: a few real VMs (TCG) whose guest panics some seconds after it
//     is ready, so every VMI fails after Running: restarts, VMIs and pods
//     per minute, API writes, whether CrashLoopBackOff ever shows, on both
//     controllers and on ours with its fail-soon window.
//
// It writes a Markdown table (and, for the herd, an SVG plot against N)
// under -out, rewritten after every run. Run as root, one at a time with
// the other suites (flock /tmp/crashloop-suites.lock). `make herd` and
// `make storm` run it; -smoke is the short run of `make bench-smoke`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	scenario              string
	vms                   []int
	minutes               float64
	controllers           []string
	failAfter, failSoon   time.Duration
	out, binDir, liteBins string
	imageDir              string
	smoke                 bool
	// launcherRuntime is cluster-lite's --launcher-runtime: process
	// (bare launchers, so hundreds fit on two cores) or podman.
	launcherRuntime string
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "herd: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		log.Error("herd failed", "err", err)
		os.Exit(1)
	}
}

// parseFlags reads and checks the command line.
func parseFlags(args []string) (options, error) {
	var o options
	var vms, ctls string
	fs := flag.NewFlagSet("herd", flag.ContinueOnError)
	fs.StringVar(&o.scenario, "scenario", "herd", "herd (fail-fast VMs) or storm (real VMs failing after Running)")
	fs.StringVar(&vms, "vms", "50 100 200 500", "herd sizes, separated by spaces or commas")
	fs.Float64Var(&o.minutes, "minutes", 10, "real minutes per run")
	fs.StringVar(&ctls, "controllers", "kubevirt,ours", "which controllers: kubevirt, ours")
	fs.DurationVar(&o.failAfter, "fail-after", 5*time.Second, "storm: the guest panics this long after it is ready")
	fs.DurationVar(&o.failSoon, "fail-soon", time.Minute, "storm: our controller's --count-running-failures-within for its extra row (0: no such row)")
	fs.StringVar(&o.out, "out", "_build/artifacts/herd", "folder of the table, the plot and each run's logs")
	fs.StringVar(&o.binDir, "bin-dir", "_build/bin", "our binaries (make build)")
	fs.StringVar(&o.liteBins, "clusterlite-bin-dir", "_build/clusterlite/bin", "cluster-lite's upstream binaries (make clusterlite)")
	fs.StringVar(&o.imageDir, "image-dir", "_build/images", "the guest images (make images)")
	fs.StringVar(&o.launcherRuntime, "launcher-runtime", "process", "how cluster-lite's node agent runs launcher pods: process or podman (a container per pod; needs make image)")
	fs.BoolVar(&o.smoke, "smoke", false, "5 VMs, 25 s per controller: checks that the tool still works (about 1.5 min)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.scenario != "herd" && o.scenario != "storm" {
		return o, fmt.Errorf("-scenario %q: want herd or storm", o.scenario)
	}
	for _, f := range strings.FieldsFunc(vms, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("-vms %q: %q is not a positive whole number", vms, f)
		}
		o.vms = append(o.vms, n)
	}
	for _, c := range strings.Split(ctls, ",") {
		if c != "kubevirt" && c != "ours" {
			return o, fmt.Errorf("-controllers %q: %q is not kubevirt or ours", ctls, c)
		}
		o.controllers = append(o.controllers, c)
	}
	if o.launcherRuntime != "process" && o.launcherRuntime != "podman" {
		return o, fmt.Errorf("-launcher-runtime %q: want process or podman", o.launcherRuntime)
	}
	if o.smoke {
		o.vms, o.minutes = []int{5}, 25.0/60
	}
	if len(o.vms) == 0 || o.minutes <= 0 || o.failAfter < 0 || o.failSoon < 0 {
		return o, fmt.Errorf("want at least one -vms, -minutes > 0, and no negative -fail-after or -fail-soon")
	}
	return o, nil
}

// run measures every (N, controller) pair in turn and rewrites the
// outputs after each.
func run(ctx context.Context, log *slog.Logger, o options) error {
	b, err := findBins(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	sc := scenario{Storm: o.scenario == "storm", FailAfter: o.failAfter}
	d := time.Duration(o.minutes * float64(time.Minute))
	var rs []result
	for _, n := range o.vms {
		for _, c := range o.controllers {
			windows := []time.Duration{0}
			if c == "ours" && sc.Storm && o.failSoon > 0 {
				windows = append(windows, o.failSoon)
			}
			for _, win := range windows {
				r, err := runOne(ctx, log, b, o, sc, c, n, d, win)
				if err != nil {
					return fmt.Errorf("%s, %d VMs: %w", c, n, err)
				}
				rs = append(rs, r)
				if err := saveResult(o, r); err != nil {
					return err
				}
			}
		}
	}
	if o.smoke {
		return checkSmoke(rs)
	}
	return nil
}

// runOne runs one controller on one herd in a fresh work folder.
func runOne(ctx context.Context, log *slog.Logger, b bins, o options, sc scenario, c string, n int, d, win time.Duration) (result, error) {
	name := fmt.Sprintf("%s-%s-%d", o.scenario, c, n)
	if win > 0 {
		name += "-failsoon"
	}
	work, err := workDir(filepath.Join(o.out, "runs"), name)
	if err != nil {
		return result{}, err
	}
	begin := time.Now()
	log.Info("run", "scenario", o.scenario, "controller", c, "vms", n, "for", d, "fail-soon", win, "work", work)
	var r result
	if c == "kubevirt" {
		r, err = runKubeVirt(ctx, log, b, work, sc, n, d)
	} else {
		r, err = runOurs(ctx, b, work, sc, n, d, win)
		// the launch folders of every attempt: keep only the events and logs
		_ = os.RemoveAll(filepath.Join(work, "state"))
	}
	log.Info("run done", "controller", r.Controller, "vms", n, "wall", time.Since(begin).Round(time.Second), "retries", len(r.Retries), "err", err)
	return r, err
}

// saveResult keeps r as JSON in -out/results (a later run of the same
// scenario, controller and size replaces it) and rewrites the table and
// plot from every result kept there, so runs made one at a time add up.
func saveResult(o options, r result) error {
	dir := filepath.Join(o.out, "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%s-%d.json", o.scenario, strings.ReplaceAll(strings.ReplaceAll(r.Controller, ",", ""), " ", "-"), r.VMs)
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, o.scenario+"-*.json"))
	if err != nil {
		return err
	}
	var rs []result
	for _, f := range files {
		var r result
		data, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err != nil {
			return fmt.Errorf("reading result %s: %w", f, err)
		}
		rs = append(rs, r)
	}
	return writeOutputs(o, rs)
}

// writeOutputs rewrites the table (and the herd's plot).
func writeOutputs(o options, rs []result) error {
	md, err := os.Create(filepath.Join(o.out, o.scenario+".md"))
	if err != nil {
		return err
	}
	defer md.Close()
	if o.scenario == "storm" {
		writeStormTable(md, rs)
		return nil
	}
	writeHerdTable(md, rs)
	svg, err := os.Create(filepath.Join(o.out, "herd.svg"))
	if err != nil {
		return err
	}
	defer svg.Close()
	return writeHerdPlot(svg, rs)
}

// checkSmoke fails a smoke run in which a controller made no retry or no
// metric was read.
func checkSmoke(rs []result) error {
	for _, r := range rs {
		if len(r.Retries) == 0 || r.Failures == 0 {
			return fmt.Errorf("smoke: %s made %d retries of %d counted failures with %d VMs; want at least one", r.Controller, len(r.Retries), r.Failures, r.VMs)
		}
		if r.Controller == "kubevirt" && (r.Requests == 0 || r.EtcdGrowthBytes == 0) {
			return fmt.Errorf("smoke: KubeVirt run read %.2f requests/s and %.0f bytes of etcd growth; want both above zero", r.Requests, r.EtcdGrowthBytes)
		}
	}
	return nil
}

// findBins resolves and checks the programs.
func findBins(o options) (bins, error) {
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	b := bins{clusterlite: abs(filepath.Join(o.binDir, "clusterlite")), controller: abs(filepath.Join(o.binDir, "virt-controller")),
		launcher: abs(filepath.Join(o.binDir, "virt-launcher")), imageDir: abs(o.imageDir), liteBinDir: abs(o.liteBins),
		launcherRuntime: o.launcherRuntime}
	for _, p := range []string{b.clusterlite, b.controller, b.launcher, filepath.Join(b.liteBinDir, "virt-controller"), filepath.Join(b.imageDir, "images.json")} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%w (run `make build images clusterlite`)", err)
		}
	}
	return b, nil
}
