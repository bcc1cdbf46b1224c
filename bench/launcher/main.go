// Command launcher measures virt-launcher against the numbers of issue #13
// and prints them as one table, every row measured in the same run so that
// ratios compare like with like on a machine whose load changes:
//
//   - the QEMU floor: `qemu-system-x86_64 -S -machine q35 -qmp stdio` exec to the end of
//     the QMP handshake (nothing can start a domain faster);
//   - on the same bare QEMU, the guest-CPU read libvirt 9.0 makes at every
//     start (qom-list of the first vCPU, one qom-get per boolean property,
//     then unavailable-features, one round trip each), the largest part of
//     a warm start, shown as its share of the launcher's and virsh's;
//   - the start rows: warm launches to Running, each beside a `virsh
//     create` of the same domain, on the host's libvirt and QEMU and, with
//     -backports-root, on those of a root made by
//     images/backports-root/build.sh, the order alternating every round;
//     their ratio is the median of the paired ratios with its 95%
//     confidence interval;
//   - warm launches: exec of virt-launcher to its Running and GuestReady
//     events, with the capability cache warm, versus `virsh create` of the
//     same domain XML against a warm libvirt daemon, and raw QEMU booting
//     the same kernel, initrd and command line to the guest's ready marker;
//   - cold first launches (a fresh --cache-dir) to Running, also as PID 1
//     of a new PID namespace (`unshare --pid --fork --mount-proc`);
//   - SIGKILL of QEMU to the launcher's Failed event;
//   - --simulate-crash and the fail-fast annotation: exec to exit, wall and
//     CPU time, against a static Go program that only exits (built by the
//     benchmark, CGO_ENABLED=0), run in turn with them the same way;
//   - the RSS of the launcher and its helper processes (QEMU excluded)
//     while the guest runs.
//
// -smoke measures every row once (seconds, for `make test`), so the
// benchmark cannot rot unnoticed; `make bench` runs the full counts and
// says of every ratio with a target whether it is met. -only measures some
// of the rows (short holds of the suites' lock).
//
// The daemon comparison needs libvirtd: the program starts virtlogd and
// libvirtd itself when none runs, with QEMU as root like the launcher's own
// configuration, from a copy of qemu.conf bind-mounted in libvirtd's own
// mount namespace (the host's file is not changed), and stops the daemons
// it started by PID afterwards. Run it as root.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/converter"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// domainName is the benchmark VMI's libvirt domain (namespace_name).
const domainName = "bench_bench"

// vmiYAML is the benchmark's VMI: the test guest, without its scratch
// disk (the benchmark times the boot alone), with annotations. It opts out
// of the display and the memory balloon that KubeVirt attaches by default,
// so that its guest boots the same devices as the raw QEMU it is compared
// with (-nodefaults, the serial console only): the boot ratio then
// measures what the launcher adds, not what the guest's kernel probes.
func vmiYAML(annotations map[string]string) (string, error) {
	vmi := testguest.VMI(testguest.Spec{Name: "bench", Namespace: "bench", Annotations: annotations})
	off := false
	vmi.Spec.Domain.Devices = v1.Devices{AutoattachGraphicsDevice: &off, AutoattachMemBalloon: &off}
	vmi.Spec.Volumes = nil
	return testguest.Manifest(vmi)
}

// config is the command line.
type config struct {
	runs, coldRuns int
	bin, images    string
	qemuBin        string
	smoke          bool
	warmCPU        int
	pairs          int
	backportsRoot  string
	only           map[string]bool
}

// stepNames are the groups of rows -only chooses from, in the order they
// run.
var stepNames = []string{"floor", "cpuread", "cold", "start", "warm", "raw", "crash"}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 10, "measurements per warm row")
	flag.IntVar(&c.coldRuns, "cold-runs", 3, "measurements per cold row (each probes QEMU's capabilities afresh)")
	flag.StringVar(&c.bin, "launcher", "_build/bin/virt-launcher", "virt-launcher binary")
	flag.StringVar(&c.images, "image-dir", "_build/images", "image folder")
	flag.StringVar(&c.qemuBin, "qemu", "qemu-system-x86_64", "QEMU binary for the floor and raw-boot rows")
	flag.IntVar(&c.warmCPU, "warm-cpu", 0, "pin the launch that fills the warm capability cache and the warm launches to this CPU (taskset; -1: no pinning): libvirt 9.0 invalidates its cache when the host CPUID differs, and on PVM hosts it differs between CPUs")
	flag.IntVar(&c.pairs, "pairs", 20, "warm launches to Running, each beside a virsh create, per libvirt pair (the start rows)")
	flag.StringVar(&c.backportsRoot, "backports-root", "", "also measure the start rows with the libvirt and QEMU of this root (make backports-root: bookworm-backports' libvirt 11.3 and QEMU 10.0), in turn with the host's")
	flag.BoolVar(&c.smoke, "smoke", false, "measure every row once (a check that the benchmark runs, not a measurement)")
	only := flag.String("only", "", "measure only these comma-separated groups of rows: "+strings.Join(stepNames, ", ")+" (warm: warm launches and virsh create in turn; all when empty)")
	flag.Parse()
	var err error
	if c.only, err = parseOnly(*only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if c.smoke {
		c.runs, c.coldRuns, c.pairs = 1, 1, 1
	}
	if c.runs < 1 || c.coldRuns < 1 || c.pairs < 1 {
		fmt.Fprintln(os.Stderr, "bench: -runs, -cold-runs and -pairs must be at least 1")
		os.Exit(2)
	}
	t, err := run(c)
	if t != nil {
		fmt.Print(t.String())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench holds what every measurement shares.
type bench struct {
	config
	dir, vmi, failFastVMI string
	kernel, initrd        string
}

// parseOnly reads -only: a set of stepNames, nil for all.
func parseOnly(v string) (map[string]bool, error) {
	if v == "" {
		return nil, nil
	}
	set := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		if !slices.Contains(stepNames, name) {
			return nil, fmt.Errorf("-only %q: unknown group %q; allowed: %s", v, name, strings.Join(stepNames, ", "))
		}
		set[name] = true
	}
	return set, nil
}

// args is the launcher's command line for a launch with the capability
// cache at cacheDir, with extra fields set by more.
func (b *bench) args(cacheDir string, more func(*launcherapi.Args)) []string {
	a := launcherapi.Args{ImageDir: b.images, RuntimeDir: filepath.Join(b.dir, "run"),
		ConsoleLog: filepath.Join(b.dir, "console.log"), CacheDir: cacheDir, LogLevel: "error", Manifest: b.vmi}
	if more != nil {
		more(&a)
	}
	return a.Build()
}

// results are every row's measurements.
type results struct {
	floor, cpuRead, cold, coldPID1, ready, killToFailed, raw, virsh   sample
	virshConnect, boot                                                sample
	warm                                                              shares
	crash, crashCPU, failFast, failFastCPU, exitAnchor, exitAnchorCPU sample
	cpuGets                                                           int
	rss                                                               []int
	start                                                             []*startRows
}

func run(c config) (*table, error) {
	dir, err := os.MkdirTemp("", "cl-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b, err := newBench(c, dir)
	if err != nil {
		return nil, err
	}
	var r results
	for _, step := range []struct {
		name, what string
		do         func(*results) error
	}{
		{"floor", "QEMU floor", b.measureFloor},
		{"cpuread", "guest-CPU read on raw QEMU", b.measureCPURead},
		{"cold", "cold launches", b.measureCold},
		{"start", "warm starts and virsh create on each libvirt pair", b.measureStart},
		{"warm", "warm launches and virsh create", b.measureWarm},
		{"raw", "raw QEMU boot", b.measureRawBoot},
		{"crash", "crash paths", b.measureCrashes},
	} {
		if c.only != nil && !c.only[step.name] {
			continue
		}
		if err := step.do(&r); err != nil {
			return nil, fmt.Errorf("%s: %w", step.what, err)
		}
	}
	return r.table(c.smoke), nil
}

// newBench writes the benchmark's VMIs into dir and finds the test
// guest's kernel and initrd.
func newBench(c config, dir string) (*bench, error) {
	for _, p := range []*string{&c.bin, &c.images} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	b := &bench{config: c, dir: dir, vmi: filepath.Join(dir, "vmi.yaml"), failFastVMI: filepath.Join(dir, "vmi-failfast.yaml")}
	for path, annotations := range map[string]map[string]string{b.vmi: nil, b.failFastVMI: {faults.FailFastAnnotation: "true"}} {
		text, err := vmiYAML(annotations)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	store, err := converter.OpenImageStore(c.images)
	if err != nil {
		return nil, fmt.Errorf("image folder %s (make images): %w", c.images, err)
	}
	if b.kernel, err = store.File(testguest.Image, testguest.Kernel); err != nil {
		return nil, err
	}
	if b.initrd, err = store.File(testguest.Image, testguest.Initrd); err != nil {
		return nil, err
	}
	return b, nil
}

// measureFloor times the QEMU floor.
func (b *bench) measureFloor(r *results) error {
	for range b.runs {
		d, err := b.qemuFloor()
		if err != nil {
			return err
		}
		r.floor = append(r.floor, d)
	}
	return nil
}

// measureCPURead times what QEMU takes to answer libvirt 9.0's guest-CPU
// read, the largest part of a warm start, on a bare QEMU.
func (b *bench) measureCPURead(r *results) error {
	for range b.runs {
		d, n, err := b.cpuRead()
		if err != nil {
			return err
		}
		r.cpuRead, r.cpuGets = append(r.cpuRead, d), n
	}
	return nil
}

// warmCache is the capability cache of the warm launches.
func (b *bench) warmCache() string { return filepath.Join(b.dir, "cache-warm") }

// pin is the wrapper that pins the warm launches to -warm-cpu.
func (b *bench) pin() []string {
	if b.warmCPU < 0 {
		return nil
	}
	return []string{"taskset", "-c", strconv.Itoa(b.warmCPU)}
}

// measureCold times cold first launches (a fresh capability cache each
// time, directly and as PID 1 of a new PID namespace).
func (b *bench) measureCold(r *results) error {
	for i := range b.coldRuns {
		res, err := b.launch(nil, b.args(filepath.Join(b.dir, fmt.Sprintf("cache-cold-%d", i)), nil), false)
		if err != nil {
			return fmt.Errorf("cold launch: %w", err)
		}
		r.cold = append(r.cold, res.running)
		res, err = b.launch([]string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"},
			b.args(filepath.Join(b.dir, fmt.Sprintf("cache-cold-pid1-%d", i)), nil), false)
		if err != nil {
			return fmt.Errorf("cold launch as PID 1: %w", err)
		}
		r.coldPID1 = append(r.coldPID1, res.running)
	}
	return nil
}

// measureWarm fills the warm capability cache with a first launch, then
// times warm launches to Running and on to GuestReady, the RSS while the
// guest runs and SIGKILL of QEMU to Failed, each followed by a `virsh
// create` of the same domain on a warm daemon, so that load that comes
// and goes on the machine weighs on both sides of their ratio alike.
func (b *bench) measureWarm(r *results) error {
	if _, err := b.launch(b.pin(), b.args(b.warmCache(), nil), false); err != nil {
		return fmt.Errorf("filling the warm cache: %w", err)
	}
	host, err := b.hostPair()
	if err != nil {
		return err
	}
	virsh, stop, err := b.virshCreate(host)
	if err != nil {
		return err
	}
	defer stop()
	for i := range b.runs {
		// virsh first every other round: the order weighs on neither side.
		if i%2 == 1 {
			if err := b.virshOnce(r, virsh, host); err != nil {
				return err
			}
		}
		res, err := b.launch(b.pin(), b.args(b.warmCache(), nil), true)
		if err != nil {
			return fmt.Errorf("warm launch: %w", err)
		}
		r.warm.add(res)
		r.ready, r.killToFailed = append(r.ready, res.ready), append(r.killToFailed, res.killToFailed)
		r.rss = append(r.rss, res.rssKiB)
		r.boot = append(r.boot, res.ready-res.running)
		if i%2 == 0 {
			if err := b.virshOnce(r, virsh, host); err != nil {
				return err
			}
		}
	}
	return nil
}

// virshOnce times one `virsh create` and one `virsh version` of the
// warm rows.
func (b *bench) virshOnce(r *results, create func() (time.Duration, error), host *libvirtPair) error {
	d, err := create()
	if err != nil {
		return err
	}
	r.virsh = append(r.virsh, d)
	if d, err = virshConnect(host); err != nil {
		return err
	}
	r.virshConnect = append(r.virshConnect, d)
	return nil
}

// measureRawBoot times raw QEMU booting the same kernel, initrd and
// command line with the same devices.
func (b *bench) measureRawBoot(r *results) error {
	if err := b.checkRawDevices(); err != nil {
		return err
	}
	for range b.runs {
		d, err := b.rawBoot()
		if err != nil {
			return err
		}
		r.raw = append(r.raw, d)
	}
	return nil
}

// measureCrashes times the crash path, by flag and by annotation, and
// the static Go program that only exits, in turn.
func (b *bench) measureCrashes(r *results) error {
	anchor, err := buildExitAnchor(b.dir)
	if err != nil {
		return err
	}
	crash := launcherapi.Args{SimulateCrash: true, Manifest: b.vmi}
	failFast := launcherapi.Args{LogLevel: "error", Manifest: b.failFastVMI}
	for range b.runs * 3 {
		for _, c := range []struct {
			argv      []string
			wall, cpu *sample
		}{
			{[]string{anchor}, &r.exitAnchor, &r.exitAnchorCPU},
			{append([]string{b.bin}, crash.Build()...), &r.crash, &r.crashCPU},
			{append([]string{b.bin}, failFast.Build()...), &r.failFast, &r.failFastCPU},
		} {
			wall, cpu, err := crashOnce(c.argv)
			if err != nil {
				return err
			}
			*c.wall, *c.cpu = append(*c.wall, wall), append(*c.cpu, cpu)
		}
	}
	return nil
}

// table is the results as the benchmark's table, with its targets; a
// smoke run does not judge its ratios.
func (r *results) table(smoke bool) *table {
	t := &table{judge: !smoke}
	t.add("QEMU floor: exec -> QMP handshake done (-S)", "anchor", r.floor)
	for _, s := range r.start {
		s.rows(t)
	}
	t.add("virsh create, warm libvirtd, same XML", "anchor", r.virsh)
	t.add(fmt.Sprintf("raw QEMU: libvirt 9.0's guest-CPU read (qom-list + %d qom-get), serial", r.cpuGets), "anchor", r.cpuRead)
	r.warm.rows(t, "warm: launcher exec -> Running", "  warm: ")
	t.add("  virsh version: exec -> connected -> exit (virsh's own share of create)", "share", r.virshConnect)
	t.pairedRatio("  warm Running / virsh create", "<= 1.0x", r.warm.running, r.virsh)
	t.ratio("  warm Running / QEMU floor", "<= 5x (moonshot)", r.warm.running, r.floor)
	t.ratio("  guest-CPU read / warm Running", "share", r.cpuRead, r.warm.running)
	t.ratio("  guest-CPU read / virsh create", "share", r.cpuRead, r.virsh)
	t.add("cold (fresh --cache-dir): exec -> Running", "<= 5s", r.cold)
	t.add("cold as PID 1 (unshare --pid --fork): exec -> Running", "<= 5s", r.coldPID1)
	t.add("raw QEMU exec -> ready marker on serial (the domain's devices)", "anchor", r.raw)
	t.add("launcher exec -> GuestReady", "", r.ready)
	t.ratio("  GuestReady / raw QEMU", "<= 1.1x", r.ready, r.raw)
	t.add("  launcher Running -> GuestReady (the guest's boot alone)", "share", r.boot)
	t.ratio("  (Running -> GuestReady) / raw QEMU", "share", r.boot, r.raw)
	t.add("SIGKILL of QEMU -> Failed event", "median < 50ms", r.killToFailed)
	t.add("static Go program that only exits: exec -> exit (wall)", "anchor", r.exitAnchor)
	t.add("static Go program that only exits: exec -> exit (CPU)", "anchor", r.exitAnchorCPU)
	t.add("--simulate-crash exec -> exit (wall)", "median <= 5ms", r.crash)
	t.ratio("  --simulate-crash / static Go exit (wall)", "<= 2.0x", r.crash, r.exitAnchor)
	t.add("--simulate-crash exec -> exit (CPU)", "<= 3ms", r.crashCPU)
	t.add("fail-fast annotation exec -> exit (wall)", "median <= 5ms", r.failFast)
	t.ratio("  fail-fast annotation / static Go exit (wall)", "<= 2.0x", r.failFast, r.exitAnchor)
	t.add("fail-fast annotation exec -> exit (CPU)", "<= 3ms", r.failFastCPU)
	if len(r.rss) == 0 {
		return t
	}
	rss := slices.Clone(r.rss)
	slices.Sort(rss)
	t.note("launcher + helpers RSS while the guest runs (QEMU excluded)", "< 40 MiB",
		fmt.Sprintf("median %.1f MiB (min %.1f, max %.1f, n %d)", mib(rss[len(rss)/2]), mib(rss[0]), mib(rss[len(rss)-1]), len(rss)))
	return t
}

func mib(kib int) float64 { return float64(kib) / 1024 }

// qemuFloor times `qemu -S -qmp stdio` from exec to the answer to
// qmp_capabilities, then quits it.
func (b *bench) qemuFloor() (time.Duration, error) {
	cmd := exec.Command(b.qemuBin, "-S", "-nodefaults", "-display", "none", "-no-user-config",
		"-accel", "tcg", "-machine", kvdefaults.MachineType, "-m", "256", "-qmp", "stdio")
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	lines, start, stop, err := startQEMU(cmd)
	if err != nil {
		return 0, err
	}
	defer stop()
	if !lines.Scan() || !strings.Contains(lines.Text(), `"QMP"`) {
		return 0, fmt.Errorf("no QMP greeting: %q", lines.Text())
	}
	if _, err := io.WriteString(in, `{"execute":"qmp_capabilities"}`+"\n"); err != nil {
		return 0, err
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), `"return"`) {
		return 0, fmt.Errorf("qmp_capabilities: %q", lines.Text())
	}
	d := time.Since(start)
	_, _ = io.WriteString(in, `{"execute":"quit"}`+"\n")
	return d, nil
}

// startQEMU starts cmd with its stdout read line by line; stop kills and
// reaps it.
func startQEMU(cmd *exec.Cmd) (lines *bufio.Scanner, start time.Time, stop func(), err error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return bufio.NewScanner(out), start, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// rawBoot times QEMU booting the test guest's kernel and initrd, with the
// launcher's command line and the devices its domain has (rawDevices),
// from exec to the ready marker on the serial console. It boots the
// machine type KubeVirt's defaults give the launcher's domain (q35), so
// that the ratio compares the same machine.
func (b *bench) rawBoot() (time.Duration, error) {
	qga := filepath.Join(b.dir, "raw-qga.sock")
	defer os.Remove(qga)
	args := []string{"-nodefaults", "-display", "none", "-no-user-config", "-accel", "tcg",
		"-machine", kvdefaults.MachineType, "-m", "256", "-smp", "1", "-kernel", b.kernel, "-initrd", b.initrd, "-append", testguest.KernelArgs,
		"-serial", "stdio", "-no-reboot"}
	cmd := exec.Command(b.qemuBin, append(args, rawDevices(qga)...)...)
	lines, start, stop, err := startQEMU(cmd)
	if err != nil {
		return 0, err
	}
	defer stop()
	timer := time.AfterFunc(90*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	for lines.Scan() {
		if strings.Contains(lines.Text(), launcherapi.DefaultReadyMarker) {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("QEMU ended before %s appeared on its serial console", launcherapi.DefaultReadyMarker)
}

// launchResult is one launch, from the exec of the launcher (or of the
// wrapper before it).
type launchResult struct {
	running, ready, killToFailed time.Duration
	// scheduled is exec -> the Scheduled event (the front, the converter,
	// the runner's start); startCall is the domain start's share of
	// Running (libvirt's start call, QEMU included).
	scheduled, startCall time.Duration
	rssKiB               int
}

// launch runs the launcher (behind wrapper, if any) to Running; with
// toReady it also waits for GuestReady and reads the RSS. It then kills
// QEMU with SIGKILL, waits for the Failed event and the exit, and checks
// that nothing of the launch is left.
func (b *bench) launch(wrapper, args []string, toReady bool) (launchResult, error) {
	var res launchResult
	argv := append(slices.Clone(wrapper), b.bin)
	argv = append(argv, args...)
	l, err := startLauncher(argv)
	if err != nil {
		return res, err
	}
	defer l.kill()
	scheduled, err := l.waitFor(launcherapi.EventScheduled, 200*time.Second)
	if err != nil {
		return res, err
	}
	running, ev, err := l.waitForEvent(launcherapi.EventRunning, 200*time.Second)
	if err != nil {
		return res, err
	}
	res.scheduled, res.running = scheduled.Sub(l.start), running.Sub(l.start)
	if ev.Running != nil {
		res.startCall = time.Duration(ev.Running.StartSeconds * float64(time.Second))
	}
	if toReady {
		at, err := l.waitFor(launcherapi.EventGuestReady, 90*time.Second)
		if err != nil {
			return res, err
		}
		res.ready = at.Sub(l.start)
		res.rssKiB = treeRSSKiB(l.cmd.Process.Pid)
	}
	pids := qemu.FindQEMU(domainName, "")
	if len(pids) != 1 {
		return res, fmt.Errorf("want one QEMU of %s, found %v", domainName, pids)
	}
	killed := time.Now()
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		return res, fmt.Errorf("killing QEMU: %w", err)
	}
	failed, err := l.waitFor(launcherapi.EventFailed, 30*time.Second)
	if err != nil {
		return res, err
	}
	res.killToFailed = failed.Sub(killed)
	if err := l.wait(30 * time.Second); err != nil {
		return res, err
	}
	if left := qemu.FindQEMU(domainName, ""); len(left) > 0 {
		return res, fmt.Errorf("QEMU %v left after the launcher exited", left)
	}
	return res, nil
}

// crashOnce runs argv, which must exit at once with the panic status,
// and returns exec -> exit wall time and CPU time (user + system, its
// children included).
func crashOnce(argv []string) (wall, cpu time.Duration, err error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	start := time.Now()
	err = cmd.Run()
	wall = time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != int(launcherapi.ExitPanic) {
		return 0, 0, fmt.Errorf("%v: want exit %d (panic), got %v", argv, launcherapi.ExitPanic, err)
	}
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// buildExitAnchor builds, in dir, the crash path's floor: a static Go
// program (CGO_ENABLED=0) whose main only calls os.Exit(2), with the go
// command that runs the benchmark.
func buildExitAnchor(dir string) (string, error) {
	src := filepath.Join(dir, "exit-anchor")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, text := range map[string]string{
		"go.mod":  "module exitanchor\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(2) }\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, "exit-anchor.bin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the static exit program: %v: %s", err, out)
	}
	return bin, nil
}
