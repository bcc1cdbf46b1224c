// Package watchdog is the launcher's reaper process, kept free of libvirt
// and cgo so that it costs a few MiB beside the launcher rather than a
// second copy of it.
//
// QEMU started by libvirt is daemonized (its parent is PID 1), so nothing
// stops it when the launcher dies of SIGKILL; the watchdog does. It holds
// the read end of a pipe whose write end only the launcher holds: when the
// launcher exits in any way, the watchdog reads EOF. If the launcher said
// "done" first, it just exits; otherwise it kills the domain's QEMU, asks
// an external libvirt to forget the domain, and deletes the per-VMI state.
package watchdog

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Flag is the hidden first argument that turns virt-launcher (the light
// front) into the watchdog of a launch: Flag DOMAIN ROOT URI.
const Flag = "--internal-reaper"

// Target is what a watchdog cleans up.
type Target struct {
	Domain string // libvirt domain name
	Root   string // embedded libvirt root (removed); may be empty
	URI    string // external libvirt URI; empty for the embedded driver
}

// Forget removes a domain from an external libvirt at uri.
type Forget func(uri, domain string) error

// Run is the watchdog process's main: args are the domain, the root and
// the URI, stdin the launcher's pipe. forget is called for an external
// libvirt. It returns the process exit code.
func Run(stdin io.Reader, args []string, forget Forget, log *slog.Logger) int {
	if len(args) != 3 {
		log.Error("reaper: want 3 arguments (domain, root, uri)", "got", args)
		return int(launcherapi.ExitUsage)
	}
	// Stay alive through the signals aimed at the launcher.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	t := Target{Domain: args[0], Root: args[1], URI: args[2]}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "done" {
			return 0
		}
	}
	log.Warn("launcher died without cleaning up; reaping its VM", "domain", t.Domain, "root", t.Root)
	reap(t, forget, log)
	return 0
}

func reap(t Target, forget Forget, log *slog.Logger) {
	// Kill QEMU first: it is what must not survive. Match by domain name
	// and, for the embedded driver, by the root its command line mentions.
	for attempt := 0; attempt < 50; attempt++ {
		pids := FindQEMU(t.Domain, t.Root)
		if t.Root != "" {
			// libvirt's capability probes (a cold cache) run QEMU without the
			// domain's name; a launcher killed during one leaves that QEMU,
			// daemonized, behind. Every QEMU of this embedded driver names a
			// path under the per-VMI root (its monitor, its pid file).
			pids = append(pids, FindQEMUUnder(t.Root)...)
			// A vTPM's swtpm, daemonized by libvirt beside QEMU, ends
			// with QEMU's connection (--terminate); one that has not
			// connected yet would not.
			pids = append(pids, FindSwtpmUnder(t.Root)...)
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				log.Info("reaper killed QEMU", "pid", pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if t.URI != "" && forget != nil {
		if err := forget(t.URI, t.Domain); err != nil {
			log.Warn("reaper could not remove the domain from libvirt", "err", err)
		}
	}
	if t.Root != "" {
		if err := os.RemoveAll(t.Root); err != nil {
			log.Warn("reaper could not remove the launcher's state", "root", t.Root, "err", err)
		}
	}
}

// FindQEMU lists the QEMU processes running domain name, and, when
// pathPart is not empty, whose command line also mentions pathPart (an
// embedded root, to tell apart launchers of the same VMI name).
func FindQEMU(name, pathPart string) []int {
	return qemuProcesses(func(args []string, cmdline string) bool {
		return hasGuestName(args, name) && (pathPart == "" || strings.Contains(cmdline, pathPart))
	})
}

// qemuProcesses lists the QEMU processes (qemu-system-*) whose command line
// match accepts, given as arguments and as the raw NUL-separated line.
func qemuProcesses(match func(args []string, cmdline string) bool) []int {
	return processes("qemu-system", match)
}

// processes lists the processes whose program name contains prog and
// whose command line match accepts.
func processes(prog string, match func(args []string, cmdline string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if strings.Contains(filepath.Base(args[0]), prog) && match(args, string(cmdline)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// FindQEMUUnder lists the QEMU processes whose command line names a path
// inside root (a per-VMI embedded libvirt root), whatever they run: the
// domain itself or one of libvirt's capability probes.
func FindQEMUUnder(root string) []int {
	return qemuProcesses(func(args []string, _ string) bool { return referencesRoot(args, root) })
}

// referencesRoot tells whether args are a QEMU command line naming a path
// inside root. The path must continue with a separator after root, so that
// /run/crashloop/vmi-12 never matches the QEMU of /run/crashloop/vmi-123.
func referencesRoot(args []string, root string) bool {
	if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "qemu-system") {
		return false
	}
	return namesPathUnder(args, root)
}

// FindSwtpmUnder lists the swtpm processes (a vTPM's emulator, which
// libvirt starts beside QEMU) whose command line names a path inside root.
func FindSwtpmUnder(root string) []int {
	return processes("swtpm", func(args []string, _ string) bool { return swtpmUnder(args, root) })
}

// swtpmUnder tells whether args are a swtpm command line naming a path
// inside root (its control socket and state folder are there).
func swtpmUnder(args []string, root string) bool {
	return len(args) > 0 && filepath.Base(args[0]) == "swtpm" && namesPathUnder(args, root)
}

// namesPathUnder tells whether an argument after the program names a path
// inside root (root followed by a separator).
func namesPathUnder(args []string, root string) bool {
	prefix := filepath.Clean(root) + "/"
	for _, a := range args[1:] {
		if strings.Contains(a, prefix) {
			return true
		}
	}
	return false
}

func hasGuestName(args []string, name string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "-name" {
			continue
		}
		for _, part := range strings.Split(args[i+1], ",") {
			if part == "guest="+name || part == name {
				return true
			}
		}
	}
	return false
}
