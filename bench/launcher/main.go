// Command launcher measures virt-launcher against the numbers issue #2 sets
// and prints them as a table:
//
//   - exec of virt-launcher to its Running event, versus `virsh create` of the
//     same domain XML against a warm libvirt daemon (target ratio <= 1.1);
//   - SIGKILL of QEMU to the launcher's Failed event (target median < 50 ms);
//   - the launcher's RSS (and its reaper's) while the guest runs;
//   - --simulate-crash exec to exit.
//
// The daemon comparison needs libvirtd: the program starts virtlogd and
// libvirtd itself when none runs, with QEMU as root like the launcher's own
// configuration (qemu.conf is restored and the daemons it started are
// stopped by PID afterwards). Run it as root: `make bench`.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcher"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

const vmiYAML = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: bench
  namespace: bench
spec:
  domain:
    memory:
      guest: 256Mi
    firmware:
      kernelBoot:
        kernelArgs: "console=ttyS0 quiet panic=-1"
        container:
          image: localhost/crashloop/test-guest:latest
          kernelPath: /boot/vmlinuz
          initrdPath: /boot/initrd.img
`

func main() {
	runs := flag.Int("runs", 7, "measurements per row")
	bin := flag.String("launcher", "_build/bin/virt-launcher", "virt-launcher binary")
	images := flag.String("image-dir", "_build/images", "image folder")
	flag.Parse()
	if err := run(*runs, *bin, *images); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type row struct {
	name, target string
	values       []time.Duration
	text         string
}

func run(runs int, bin, images string) error {
	dir, err := os.MkdirTemp("", "cl-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	vmi := filepath.Join(dir, "vmi.yaml")
	if err := os.WriteFile(vmi, []byte(vmiYAML), 0o644); err != nil {
		return err
	}
	common := []string{"--image-dir", images, "--runtime-dir", filepath.Join(dir, "run"), "--console-log", filepath.Join(dir, "console.log"), "--log-level", "error"}

	// 1. launcher exec -> Running, and 2. SIGKILL of QEMU -> Failed.
	var toRunning, killToFailed []time.Duration
	var rss, reaperRSS []int
	for i := 0; i < runs+1; i++ {
		r, err := startLauncher(bin, append(common, vmi)...)
		if err != nil {
			return err
		}
		running, err := r.waitFor(launcherapi.EventRunning, 60*time.Second)
		if err != nil {
			r.kill()
			return err
		}
		if i > 0 { // the first run warms the capability cache
			toRunning = append(toRunning, running.at.Sub(r.start))
		}
		if i == 1 {
			if _, err := r.waitFor(launcherapi.EventGuestReady, 90*time.Second); err != nil {
				r.kill()
				return err
			}
			rss = append(rss, rssKiB(r.cmd.Process.Pid))
			for _, c := range children(r.cmd.Process.Pid) {
				reaperRSS = append(reaperRSS, rssKiB(c))
			}
		}
		pids := qemu.FindQEMU("bench_bench", "")
		if len(pids) != 1 {
			r.kill()
			return fmt.Errorf("want one QEMU, found %v", pids)
		}
		killed := time.Now()
		syscall.Kill(pids[0], syscall.SIGKILL)
		failed, err := r.waitFor(launcherapi.EventFailed, 30*time.Second)
		if err != nil {
			r.kill()
			return err
		}
		if i > 0 {
			killToFailed = append(killToFailed, failed.at.Sub(killed))
		}
		r.cmd.Wait()
	}

	// 3. virsh create against a warm daemon.
	xmlOut, err := exec.Command(bin, append(append([]string{"--dry-run", "--accel", "tcg"}, common...), vmi)...).Output()
	if err != nil {
		return fmt.Errorf("virt-launcher --dry-run: %w", err)
	}
	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, xmlOut, 0o644); err != nil {
		return err
	}
	stopDaemon, err := ensureDaemon()
	if err != nil {
		return err
	}
	defer stopDaemon()
	var virsh []time.Duration
	for i := 0; i < runs+1; i++ {
		start := time.Now()
		if out, err := exec.Command("virsh", "-c", "qemu:///system", "create", xmlPath).CombinedOutput(); err != nil {
			return fmt.Errorf("virsh create: %v: %s", err, out)
		}
		if i > 0 {
			virsh = append(virsh, time.Since(start))
		}
		exec.Command("virsh", "-c", "qemu:///system", "destroy", "bench_bench").Run()
	}

	// 4. --simulate-crash exec -> exit.
	var crash []time.Duration
	for i := 0; i < runs*3; i++ {
		start := time.Now()
		exec.Command(bin, "--simulate-crash", vmi).Run()
		crash = append(crash, time.Since(start))
	}

	ratio := float64(median(toRunning)) / float64(median(virsh))
	rows := []row{
		{name: "virt-launcher exec -> Running event", values: toRunning},
		{name: "virsh create (warm libvirtd, same XML)", values: virsh},
		{name: "ratio launcher / virsh (medians)", target: "<= 1.1", text: fmt.Sprintf("%.2f", ratio)},
		{name: "SIGKILL of QEMU -> Failed event", target: "median < 50ms", values: killToFailed},
		{name: "--simulate-crash exec -> exit", values: crash},
		{name: "launcher RSS while the guest runs", text: fmt.Sprintf("%d KiB (reaper %v KiB)", rss[0], reaperRSS)},
	}
	fmt.Printf("\n%-42s %-14s %10s %10s %10s  %s\n", "measurement", "target", "median", "min", "max", "n")
	for _, r := range rows {
		if r.values == nil {
			fmt.Printf("%-42s %-14s %10s\n", r.name, r.target, r.text)
			continue
		}
		s := slices.Clone(r.values)
		slices.Sort(s)
		fmt.Printf("%-42s %-14s %10s %10s %10s  %d\n", r.name, r.target, round(median(s)), round(s[0]), round(s[len(s)-1]), len(s))
	}
	return nil
}

func round(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

type launched struct {
	cmd   *exec.Cmd
	start time.Time
	lines *bufio.Scanner
}

type seen struct {
	ev launcherapi.Event
	at time.Time
}

func startLauncher(bin string, args ...string) (*launched, error) {
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &launched{cmd: cmd, start: start, lines: bufio.NewScanner(out)}, nil
}

// waitFor reads events until name; the time is when this process read it.
func (l *launched) waitFor(name string, timeout time.Duration) (seen, error) {
	deadline := time.AfterFunc(timeout, func() { l.cmd.Process.Kill() })
	defer deadline.Stop()
	for l.lines.Scan() {
		var ev launcherapi.Event
		if err := json.Unmarshal(l.lines.Bytes(), &ev); err != nil {
			continue
		}
		if ev.Event == name {
			return seen{ev: ev, at: time.Now()}, nil
		}
	}
	return seen{}, fmt.Errorf("launcher ended before a %s event", name)
}

func (l *launched) kill() { l.cmd.Process.Kill(); l.cmd.Wait() }

func rssKiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return -1
}

// children lists the reaper processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		// The fields after the command name (in parentheses): state, ppid.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n)); strings.Contains(string(cmd), launcher.ReaperFlag) {
			out = append(out, n)
		}
	}
	return out
}

// ensureDaemon starts virtlogd and libvirtd with QEMU as root when no
// libvirtd answers, and returns how to undo it.
func ensureDaemon() (func(), error) {
	if exec.Command("virsh", "-c", "qemu:///system", "version").Run() == nil {
		return func() {}, nil
	}
	const conf = "/etc/libvirt/qemu.conf"
	orig, err := os.ReadFile(conf)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", conf, err)
	}
	patched := string(orig) + "\n# added by crashloop bench (restored afterwards)\nuser = \"root\"\ngroup = \"root\"\n"
	if err := os.WriteFile(conf, []byte(patched), 0o600); err != nil {
		return nil, err
	}
	os.MkdirAll("/var/log/libvirt", 0o755)
	var started []*exec.Cmd
	for _, d := range []string{"virtlogd", "libvirtd"} {
		c := exec.Command(d)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			return nil, fmt.Errorf("starting %s: %w", d, err)
		}
		started = append(started, c)
	}
	undo := func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].Process.Signal(syscall.SIGTERM)
			started[i].Wait()
		}
		os.WriteFile(conf, orig, 0o600)
	}
	for i := 0; i < 100; i++ {
		if exec.Command("virsh", "-c", "qemu:///system", "version").Run() == nil {
			return undo, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	undo()
	return nil, fmt.Errorf("libvirtd did not answer within 10s")
}
