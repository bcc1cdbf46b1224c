package qemu

import (
	"strings"
	"testing"
)

const hostMounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
`

// podman without --privileged on a cgroup v1 host: everything read-only.
const containerMounts = `700 690 0:60 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
701 700 0:29 /libpod_parent/x /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime master:11 - cgroup cgroup rw,cpu
702 700 0:30 / /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
`

const cgroup2RO = `30 23 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
`

func TestParseConfinement(t *testing.T) {
	for _, tc := range []struct {
		name, capEff, mounts string
		want                 Confinement
		conf                 []string
	}{
		{"host root", "000001fffeffffff", hostMounts, Confinement{}, nil},
		{"unprivileged container v1", "00000000a80425fb", containerMounts,
			Confinement{NoMountNamespace: true, NoCgroups: true}, []string{"namespaces = [ ]", "cgroup_controllers = [ ]"}},
		{"cap but cgroup2 read-only", "000001ffffffffff", cgroup2RO,
			Confinement{NoCgroups: true}, []string{"cgroup_controllers = [ ]"}},
		{"no cgroup mounted", "000001ffffffffff", "", Confinement{NoCgroups: true}, []string{"cgroup_controllers = [ ]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := "Name:\tx\nCapPrm:\t0\nCapEff:\t" + tc.capEff + "\n"
			got, err := parseConfinement(strings.NewReader(status), strings.NewReader(tc.mounts))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			conf := got.QEMUConf()
			for _, line := range tc.conf {
				if !strings.Contains(conf, line+"\n") {
					t.Errorf("qemu.conf lacks %q:\n%s", line, conf)
				}
			}
			if len(tc.conf) == 0 && conf != "" {
				t.Errorf("unconfined qemu.conf should add nothing, got:\n%s", conf)
			}
		})
	}
}

func TestParseConfinementBadInput(t *testing.T) {
	if _, err := parseConfinement(strings.NewReader("Name:\tx\n"), strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "CapEff") {
		t.Fatalf("want an error naming CapEff, got %v", err)
	}
	if _, err := parseConfinement(strings.NewReader("CapEff:\tzz\n"), strings.NewReader("")); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Fatalf("want an error naming the bad value, got %v", err)
	}
}
