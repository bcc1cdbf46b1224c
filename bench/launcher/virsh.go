package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// virshConnect times `virsh version` against the pair's daemon: virsh's
// start, its connection and two calls, what `virsh create` pays besides
// the daemon's domain start.
func virshConnect(p *libvirtPair) (time.Duration, error) {
	start := time.Now()
	if msg, err := p.command("virsh", "-c", "qemu:///system", "version").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("virsh version (%s): %v: %s", p.name, err, msg)
	}
	return time.Since(start), nil
}

// scratchDir finds the per-VMI scratch folder in a domain's socket paths.
var scratchDir = regexp.MustCompile(`(?:socket|path)="(/[^"]*/scratch)/[^"/]+"`)

// domainXML renders the launcher's domain (--dry-run, with the host's
// launcher) into the benchmark's folder once: every pair's `virsh create`
// starts this same domain. dirs are the per-VMI folders its sockets name,
// gone when the dry run exits, which virsh's daemon needs made again.
func (b *bench) domainXML() (path string, dirs []string, err error) {
	path = filepath.Join(b.dir, "domain.xml")
	dry := b.args(b.warmCache(), func(a *launcherapi.Args) { a.DryRun, a.Accel = true, launcherapi.AccelTCG })
	out, err := exec.Command(b.bin, dry...).Output()
	if err != nil {
		return "", nil, fmt.Errorf("virt-launcher --dry-run: %w", err)
	}
	// A dry run prints the defaulted VMI (a YAML document) before the XML.
	i := bytes.Index(out, []byte("<domain"))
	if i < 0 {
		return "", nil, fmt.Errorf("virt-launcher --dry-run printed no <domain> element: %.200q", out)
	}
	if err := os.WriteFile(path, out[i:], 0o644); err != nil {
		return "", nil, err
	}
	for _, m := range scratchDir.FindAllSubmatch(out[i:], -1) {
		dirs = append(dirs, string(m[1]))
	}
	return path, dirs, nil
}

// virshCreate makes sure the pair's libvirt daemon runs and warms it with
// a first `virsh create` of the launcher's domain; create times one more
// (and destroys it), stop undoes the rest.
func (b *bench) virshCreate(p *libvirtPair) (create func() (time.Duration, error), stop func(), err error) {
	xmlPath, dirs, err := b.domainXML()
	if err != nil {
		return nil, nil, err
	}
	stopDaemon, err := p.daemon()
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		stopDaemon()
		for _, dir := range dirs {
			_ = os.RemoveAll(filepath.Dir(dir))
		}
	}
	create = func() (time.Duration, error) {
		for _, dir := range dirs {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return 0, err
			}
		}
		start := time.Now()
		if msg, err := p.command("virsh", "-c", "qemu:///system", "create", xmlPath).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("virsh create (%s): %v: %s", p.name, err, msg)
		}
		d := time.Since(start)
		if msg, err := p.command("virsh", "-c", "qemu:///system", "destroy", domainName).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("virsh destroy (%s): %v: %s", p.name, err, msg)
		}
		return d, nil
	}
	if _, err := create(); err != nil {
		stop()
		return nil, nil, err
	}
	return create, stop, nil
}

// startDaemons starts virtlogd and libvirtd with the pair (its root's
// qemu.conf runs QEMU as root, like the launcher's own configuration) and
// waits until virsh reaches libvirtd; stop ends them by PID.
func startDaemons(p *libvirtPair) (func(), error) {
	var started []*exec.Cmd
	stop := func() {
		for i := len(started) - 1; i >= 0; i-- {
			_ = started[i].Process.Signal(syscall.SIGTERM)
			_ = started[i].Wait()
		}
	}
	for _, d := range []string{"virtlogd", "libvirtd"} {
		c := p.command(d) // nsenter execs it: the PID is the daemon's
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("starting %s (%s): %w", d, p.name, err)
		}
		started = append(started, c)
	}
	var err error
	for range 100 {
		if err = p.command("virsh", "-c", "qemu:///system", "version").Run(); err == nil {
			return stop, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return nil, errors.Join(fmt.Errorf("libvirtd (%s) did not answer within 10s", p.name), err)
}
