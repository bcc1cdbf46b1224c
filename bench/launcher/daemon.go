package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// hostQemuConf is libvirtd's QEMU driver configuration on the host.
const hostQemuConf = "/etc/libvirt/qemu.conf"

// ensureDaemon starts virtlogd and libvirtd when no libvirtd answers, and
// returns how to undo it: stop the daemons it started, by PID. libvirtd
// runs QEMU as root, like the launcher's own configuration, without a
// change to the host's qemu.conf: it runs in a mount namespace of its own
// in which a copy of the host's file with user and group root, kept in
// dir, is bind-mounted over it. Its socket and state are the host's.
func ensureDaemon(dir string) (func(), error) {
	if exec.Command("virsh", "-c", "qemu:///system", "version").Run() == nil {
		return func() {}, nil
	}
	orig, err := os.ReadFile(hostQemuConf)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", hostQemuConf, err)
	}
	private := filepath.Join(dir, "qemu.conf")
	conf := string(orig) + "\n# the crashloop benchmark's libvirtd: QEMU as root\nuser = \"root\"\ngroup = \"root\"\n"
	if err := os.WriteFile(private, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := os.MkdirAll("/var/log/libvirt", 0o755); err != nil {
		return nil, err
	}
	var started []*exec.Cmd
	undo := func() {
		for i := len(started) - 1; i >= 0; i-- {
			_ = started[i].Process.Signal(syscall.SIGTERM)
			_ = started[i].Wait()
		}
	}
	for _, argv := range [][]string{
		{"virtlogd"},
		// unshare and sh exec, so the PID is libvirtd's.
		{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", `mount --bind "$0" ` + hostQemuConf + ` && exec libvirtd`, private},
	} {
		c := exec.Command(argv[0], argv[1:]...)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			undo()
			return nil, fmt.Errorf("starting %s: %w", argv[0], err)
		}
		started = append(started, c)
	}
	for range 100 {
		if exec.Command("virsh", "-c", "qemu:///system", "version").Run() == nil {
			return undo, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	undo()
	return nil, fmt.Errorf("libvirtd did not answer within 10s")
}
