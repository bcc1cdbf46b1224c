package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// libvirtPair is one libvirt and QEMU pair the start rows measure with the
// same launcher binary and the same domain: the host's own (Debian 12:
// libvirt 9.0, QEMU 7.2), or the one in a root made by
// images/backports-root/build.sh (bookworm-backports: libvirt 11.3, QEMU
// 10.0), entered with nsenter into a mount namespace that a holder process
// keeps chrooted there.
type libvirtPair struct {
	name     string
	enter    []string // command prefix that runs a program with this pair; nil for the host's
	cache    string   // the launcher's warm capability cache with this pair
	versions string   // "libvirt X, QEMU Y", as the pair's own binaries say
	// daemon makes sure the pair's libvirtd answers; stop undoes it.
	daemon func() (stop func(), err error)
	// close ends what the pair holds (the root's holder).
	close func()
}

// command runs argv with this pair.
func (p *libvirtPair) command(argv ...string) *exec.Cmd {
	full := append(append([]string{}, p.enter...), argv...)
	return exec.Command(full[0], full[1:]...)
}

// readVersions asks the pair's libvirtd and QEMU for their versions.
func (p *libvirtPair) readVersions() error {
	var parts []string
	for _, c := range []struct{ what, bin string }{{"libvirt", "libvirtd"}, {"QEMU", "qemu-system-x86_64"}} {
		out, err := p.command(c.bin, "--version").Output()
		if err != nil {
			return fmt.Errorf("%s --version (%s): %w", c.bin, p.name, err)
		}
		f := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
		if len(f) == 0 {
			return fmt.Errorf("%s --version (%s) printed nothing", c.bin, p.name)
		}
		v := f[len(f)-1]
		if c.what == "QEMU" && len(f) >= 4 {
			v = f[3] // "QEMU emulator version 7.2.19 (Debian ...)"
		}
		parts = append(parts, c.what+" "+v)
	}
	p.versions = strings.Join(parts, ", ")
	return nil
}

// hostPair is the host's own libvirt and QEMU.
func (b *bench) hostPair() (*libvirtPair, error) {
	p := &libvirtPair{name: "host", cache: b.warmCache(), close: func() {}}
	p.daemon = func() (func(), error) { return ensureDaemon(b.dir) }
	return p, p.readVersions()
}

// rootPair enters root, a root made by images/backports-root/build.sh: a
// holder process (enter.sh ... sleep) keeps a mount namespace with the
// root's binds chrooted there, and every command of the pair runs in it
// through `nsenter --mount --root --wd`. The image folder and the
// launcher's folder are bound in at their real paths.
func (b *bench) rootPair(root string) (*libvirtPair, error) {
	enter, err := filepath.Abs(filepath.Join("images", "backports-root", "enter.sh"))
	if err != nil {
		return nil, err
	}
	var binds []string
	for _, d := range []string{b.images, filepath.Dir(b.bin)} {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, fmt.Errorf("backports root: %w", err)
		}
		binds = append(binds, "--bind", real)
	}
	holder := exec.Command(enter, append(append([]string{root}, binds...), "sleep", "infinity")...)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("entering %s: %w", root, err)
	}
	stop := func() { _ = holder.Process.Kill(); _ = holder.Wait() }
	pid := holder.Process.Pid
	if err := waitChrooted(pid, root, &stderr); err != nil {
		stop()
		return nil, err
	}
	p := &libvirtPair{name: "backports", cache: filepath.Join(b.dir, "cache-warm-backports"), close: stop,
		enter: []string{"nsenter", "--target", strconv.Itoa(pid), "--mount", "--root", "--wd", "--"}}
	p.daemon = func() (func(), error) { return startDaemons(p) }
	if err := p.readVersions(); err != nil {
		stop()
		return nil, err
	}
	return p, nil
}
