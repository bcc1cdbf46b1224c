package qemu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// capSysAdmin is CAP_SYS_ADMIN's bit in a capability set.
const capSysAdmin = 21

// Confinement is what the launcher's process may not do that libvirt's QEMU
// driver does by default: each domain's mount namespace needs CAP_SYS_ADMIN,
// and each domain's cgroups need a writable cgroup filesystem. An
// unprivileged container (podman without --privileged) has neither.
type Confinement struct {
	// NoMountNamespace: the effective capabilities lack CAP_SYS_ADMIN.
	NoMountNamespace bool
	// NoCgroups: no cgroup or cgroup2 filesystem is mounted read-write.
	NoCgroups bool
}

// DetectConfinement reads this process's capabilities and mounts.
func DetectConfinement() (Confinement, error) {
	status, err := os.Open("/proc/self/status")
	if err != nil {
		return Confinement{}, fmt.Errorf("reading capabilities: %w", err)
	}
	defer status.Close()
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Confinement{}, fmt.Errorf("reading mounts: %w", err)
	}
	defer mounts.Close()
	return parseConfinement(status, mounts)
}

// parseConfinement decides from /proc/self/status and /proc/self/mountinfo.
func parseConfinement(status, mountinfo io.Reader) (Confinement, error) {
	var c Confinement
	found := false
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return c, fmt.Errorf("parsing CapEff %q: %w", strings.TrimSpace(v), err)
		}
		c.NoMountNamespace = eff&(1<<capSysAdmin) == 0
		found = true
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading capabilities: %w", err)
	}
	if !found {
		return c, fmt.Errorf("no CapEff line in /proc/self/status")
	}
	c.NoCgroups = true
	sc = bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, after := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 6 || len(after) < 1 || (after[0] != "cgroup" && after[0] != "cgroup2") {
			continue
		}
		if !hasOption(fields[5], "ro") {
			c.NoCgroups = false
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading mounts: %w", err)
	}
	return c, nil
}

func hasOption(opts, opt string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// QEMUConf is the qemu.conf text that turns off what the process may not
// do; empty when nothing is confined.
func (c Confinement) QEMUConf() string {
	var b strings.Builder
	if c.NoMountNamespace {
		b.WriteString("# no CAP_SYS_ADMIN (an unprivileged container): no per-domain mount namespace\nnamespaces = [ ]\n")
	}
	if c.NoCgroups {
		b.WriteString("# no writable cgroup filesystem (an unprivileged container): no per-domain cgroups\ncgroup_controllers = [ ]\n")
	}
	return b.String()
}
