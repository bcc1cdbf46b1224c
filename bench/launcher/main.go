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
//   - warm launches: exec of virt-launcher to its Running and GuestReady
//     events, with the capability cache warm, versus `virsh create` of the
//     same domain XML against a warm libvirt daemon, and raw QEMU booting
//     the same kernel, initrd and command line to the guest's ready marker;
//   - cold first launches (a fresh --cache-dir) to Running, also as PID 1
//     of a new PID namespace (`unshare --pid --fork --mount-proc`);
//   - SIGKILL of QEMU to the launcher's Failed event;
//   - --simulate-crash and the fail-fast annotation: exec to exit, wall and
//     CPU time;
//   - the RSS of the launcher and its helper processes (QEMU excluded)
//     while the guest runs.
//
// -smoke measures every row once (seconds, for `make test`), so the
// benchmark cannot rot unnoticed; `make bench` runs the full counts.
//
// The daemon comparison needs libvirtd: the program starts virtlogd and
// libvirtd itself when none runs, with QEMU as root like the launcher's own
// configuration (qemu.conf is restored and the daemons it started are
// stopped by PID afterwards). Run it as root.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/converter"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

const (
	guestImage = "localhost/crashloop/test-guest:latest"
	kernelArgs = "console=ttyS0 quiet panic=-1"
	// readyMarker is what the test guest's /init prints (the launcher's
	// default --ready-marker).
	readyMarker = "HARNESS-GUEST-READY"
	domainName  = "bench_bench"
)

// vmiYAML is the benchmark's VMI; annotations is indented under metadata.
func vmiYAML(annotations string) string {
	return `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: bench
  namespace: bench
` + annotations + `spec:
  domain:
    memory:
      guest: 256Mi
    firmware:
      kernelBoot:
        kernelArgs: "` + kernelArgs + `"
        container:
          image: ` + guestImage + `
          kernelPath: /boot/vmlinuz
          initrdPath: /boot/initrd.img
`
}

// config is the command line.
type config struct {
	runs, coldRuns int
	bin, images    string
	qemuBin        string
	smoke          bool
	warmCPU        int
}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 10, "measurements per warm row")
	flag.IntVar(&c.coldRuns, "cold-runs", 3, "measurements per cold row (each probes QEMU's capabilities afresh)")
	flag.StringVar(&c.bin, "launcher", "_build/bin/virt-launcher", "virt-launcher binary")
	flag.StringVar(&c.images, "image-dir", "_build/images", "image folder")
	flag.StringVar(&c.qemuBin, "qemu", "qemu-system-x86_64", "QEMU binary for the floor and raw-boot rows")
	flag.IntVar(&c.warmCPU, "warm-cpu", 0, "pin the launch that fills the warm capability cache and the warm launches to this CPU (taskset; -1: no pinning): libvirt 9.0 invalidates its cache when the host CPUID differs, and on PVM hosts it differs between CPUs")
	flag.BoolVar(&c.smoke, "smoke", false, "measure every row once (a check that the benchmark runs, not a measurement)")
	flag.Parse()
	if c.smoke {
		c.runs, c.coldRuns = 1, 1
	}
	if c.runs < 1 || c.coldRuns < 1 {
		fmt.Fprintln(os.Stderr, "bench: -runs and -cold-runs must be at least 1")
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

func (b *bench) args(cacheDir string, extra ...string) []string {
	a := []string{"--image-dir", b.images, "--runtime-dir", filepath.Join(b.dir, "run"),
		"--console-log", filepath.Join(b.dir, "console.log"), "--cache-dir", cacheDir, "--log-level", "error"}
	return append(append(a, extra...), b.vmi)
}

func run(c config) (*table, error) {
	dir, err := os.MkdirTemp("", "cl-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b := &bench{config: c, dir: dir, vmi: filepath.Join(dir, "vmi.yaml"), failFastVMI: filepath.Join(dir, "vmi-failfast.yaml")}
	if err := os.WriteFile(b.vmi, []byte(vmiYAML("")), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(b.failFastVMI, []byte(vmiYAML("  annotations:\n    "+faults.FailFastAnnotation+": \"true\"\n")), 0o644); err != nil {
		return nil, err
	}
	store, err := converter.OpenImageStore(c.images)
	if err != nil {
		return nil, fmt.Errorf("image folder %s (make images): %w", c.images, err)
	}
	if b.kernel, err = store.File(guestImage, "/boot/vmlinuz"); err != nil {
		return nil, err
	}
	if b.initrd, err = store.File(guestImage, "/boot/initrd.img"); err != nil {
		return nil, err
	}
	t := &table{}

	// The QEMU floor.
	var floor sample
	for range c.runs {
		d, err := b.qemuFloor()
		if err != nil {
			return t, fmt.Errorf("QEMU floor: %w", err)
		}
		floor = append(floor, d)
	}

	// What QEMU takes to answer libvirt 9.0's guest-CPU read, the largest
	// part of a warm start, on a bare QEMU.
	var cpuRead sample
	cpuGets := 0
	for range c.runs {
		d, n, err := b.cpuRead()
		if err != nil {
			return t, fmt.Errorf("guest-CPU read on raw QEMU: %w", err)
		}
		cpuRead, cpuGets = append(cpuRead, d), n
	}

	// Cold first launches: a fresh capability cache each time, directly
	// and as PID 1 of a new PID namespace. A first launch fills the cache
	// of the warm launches.
	var cold, coldPID1 sample
	var pin []string
	if c.warmCPU >= 0 {
		pin = []string{"taskset", "-c", strconv.Itoa(c.warmCPU)}
	}
	warmCache := filepath.Join(dir, "cache-warm")
	if _, err := b.launch(pin, b.args(warmCache), false); err != nil {
		return t, fmt.Errorf("filling the warm cache: %w", err)
	}
	for i := range c.coldRuns {
		cache := filepath.Join(dir, fmt.Sprintf("cache-cold-%d", i))
		r, err := b.launch(nil, b.args(cache), false)
		if err != nil {
			return t, fmt.Errorf("cold launch: %w", err)
		}
		cold = append(cold, r.running)
		cache = filepath.Join(dir, fmt.Sprintf("cache-cold-pid1-%d", i))
		r, err = b.launch([]string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"}, b.args(cache), false)
		if err != nil {
			return t, fmt.Errorf("cold launch as PID 1: %w", err)
		}
		coldPID1 = append(coldPID1, r.running)
	}

	// Warm launches, to Running and on to GuestReady; the RSS while the
	// guest runs; then SIGKILL of QEMU to Failed.
	var warm, ready, killToFailed sample
	var rss []int
	for range c.runs {
		r, err := b.launch(pin, b.args(warmCache), true)
		if err != nil {
			return t, fmt.Errorf("warm launch: %w", err)
		}
		warm, ready, killToFailed = append(warm, r.running), append(ready, r.ready), append(killToFailed, r.killToFailed)
		rss = append(rss, r.rssKiB)
	}

	// Raw QEMU booting the same kernel, initrd and command line.
	var raw sample
	for range c.runs {
		d, err := b.rawBoot()
		if err != nil {
			return t, fmt.Errorf("raw QEMU boot: %w", err)
		}
		raw = append(raw, d)
	}

	// virsh create of the same domain against a warm daemon.
	virsh, err := b.virshCreate(warmCache)
	if err != nil {
		return t, err
	}

	// The crash path, by flag and by annotation.
	crash, crashCPU, err := b.crashes([]string{"--simulate-crash", b.vmi})
	if err != nil {
		return t, err
	}
	failFast, failFastCPU, err := b.crashes([]string{"--log-level", "error", b.failFastVMI})
	if err != nil {
		return t, err
	}

	t.add("QEMU floor: exec -> QMP handshake done (-S)", "anchor", floor)
	t.add("virsh create, warm libvirtd, same XML", "anchor", virsh)
	t.add(fmt.Sprintf("raw QEMU: libvirt 9.0's guest-CPU read (qom-list + %d qom-get), serial", cpuGets), "anchor", cpuRead)
	t.add("warm: launcher exec -> Running", "", warm)
	t.ratio("  warm Running / virsh create", "<= 0.5x", warm, virsh)
	t.ratio("  warm Running / QEMU floor", "<= 5x (moonshot)", warm, floor)
	t.ratio("  guest-CPU read / warm Running", "share", cpuRead, warm)
	t.ratio("  guest-CPU read / virsh create", "share", cpuRead, virsh)
	t.add("cold (fresh --cache-dir): exec -> Running", "<= 5s", cold)
	t.add("cold as PID 1 (unshare --pid --fork): exec -> Running", "<= 5s", coldPID1)
	t.add("raw QEMU exec -> ready marker on serial", "anchor", raw)
	t.add("launcher exec -> GuestReady", "", ready)
	t.ratio("  GuestReady / raw QEMU", "<= 1.1x", ready, raw)
	t.add("SIGKILL of QEMU -> Failed event", "median < 50ms", killToFailed)
	t.add("--simulate-crash exec -> exit (wall)", "median <= 5ms", crash)
	t.add("--simulate-crash exec -> exit (CPU)", "<= 3ms", crashCPU)
	t.add("fail-fast annotation exec -> exit (wall)", "median <= 5ms", failFast)
	t.add("fail-fast annotation exec -> exit (CPU)", "<= 3ms", failFastCPU)
	slices.Sort(rss)
	t.note("launcher + helpers RSS while the guest runs (QEMU excluded)", "< 40 MiB",
		fmt.Sprintf("median %.1f MiB (min %.1f, max %.1f, n %d)", mib(rss[len(rss)/2]), mib(rss[0]), mib(rss[len(rss)-1]), len(rss)))
	return t, nil
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
// launcher's command line, from exec to the ready marker on the serial
// console. It boots the machine type KubeVirt's defaults give the
// launcher's domain (q35), so that the ratio compares the same machine.
func (b *bench) rawBoot() (time.Duration, error) {
	cmd := exec.Command(b.qemuBin, "-nodefaults", "-display", "none", "-no-user-config", "-accel", "tcg",
		"-machine", kvdefaults.MachineType, "-m", "256", "-smp", "1", "-kernel", b.kernel, "-initrd", b.initrd, "-append", kernelArgs,
		"-serial", "stdio", "-no-reboot")
	lines, start, stop, err := startQEMU(cmd)
	if err != nil {
		return 0, err
	}
	defer stop()
	timer := time.AfterFunc(90*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	for lines.Scan() {
		if strings.Contains(lines.Text(), readyMarker) {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("QEMU ended before %s appeared on its serial console", readyMarker)
}

// launchResult is one launch, from the exec of the launcher (or of the
// wrapper before it).
type launchResult struct {
	running, ready, killToFailed time.Duration
	rssKiB                       int
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
	running, err := l.waitFor(launcherapi.EventRunning, 200*time.Second)
	if err != nil {
		return res, err
	}
	res.running = running.Sub(l.start)
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

// crashes runs the launcher with args, which make it crash at once, and
// returns exec -> exit wall time and CPU time (user + system, its children
// included).
func (b *bench) crashes(args []string) (wall, cpu sample, err error) {
	for range b.runs * 3 {
		cmd := exec.Command(b.bin, args...)
		start := time.Now()
		err := cmd.Run()
		wall = append(wall, time.Since(start))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != int(launcherapi.ExitPanic) {
			return nil, nil, fmt.Errorf("%s %v: want exit %d (panic), got %v", b.bin, args, launcherapi.ExitPanic, err)
		}
		cpu = append(cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
	}
	return wall, cpu, nil
}

// scratchDir finds the per-VMI scratch folder in a domain's socket paths.
var scratchDir = regexp.MustCompile(`(?:socket|path)="(/[^"]*/scratch)/[^"/]+"`)

// virshCreate renders the launcher's domain XML (--dry-run) and times
// `virsh create` of it on a warm libvirt daemon; the first create warms it.
func (b *bench) virshCreate(cache string) (sample, error) {
	xmlOut, err := exec.Command(b.bin, append([]string{"--dry-run", "--accel", "tcg"}, b.args(cache)...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("virt-launcher --dry-run: %w", err)
	}
	// A dry run prints the defaulted VMI (a YAML document) before the XML.
	i := bytes.Index(xmlOut, []byte("<domain"))
	if i < 0 {
		return nil, fmt.Errorf("virt-launcher --dry-run printed no <domain> element: %.200q", xmlOut)
	}
	xmlPath := filepath.Join(b.dir, "domain.xml")
	if err := os.WriteFile(xmlPath, xmlOut[i:], 0o644); err != nil {
		return nil, err
	}
	// The dry run's per-VMI folder, where the domain's sockets (VNC, guest
	// agent) go, is gone when it exits: make it again for the daemon.
	for _, m := range scratchDir.FindAllSubmatch(xmlOut[i:], -1) {
		dir := string(m[1])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		defer os.RemoveAll(filepath.Dir(dir))
	}
	stopDaemon, err := ensureDaemon()
	if err != nil {
		return nil, err
	}
	defer stopDaemon()
	var out sample
	for i := range b.runs + 1 {
		start := time.Now()
		if msg, err := exec.Command("virsh", "-c", "qemu:///system", "create", xmlPath).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("virsh create: %v: %s", err, msg)
		}
		if i > 0 {
			out = append(out, time.Since(start))
		}
		if msg, err := exec.Command("virsh", "-c", "qemu:///system", "destroy", domainName).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("virsh destroy: %v: %s", err, msg)
		}
	}
	return out, nil
}
