package qemu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// confValue returns the value of key in a qemu.conf, unquoted, and whether
// the key is set.
func confValue(conf, key string) (string, bool) {
	for _, line := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == key {
			uq, err := strconv.Unquote(strings.TrimSpace(v))
			if err != nil {
				return strings.TrimSpace(v), true
			}
			return uq, true
		}
	}
	return "", false
}

// TestEmbedQEMUConfRunsQEMUAsTheLauncher checks that QEMU (and swtpm) run
// as the launcher's own user: root for a root launcher, the numeric IDs
// for KubeVirt's non-root one (107), which could not switch to root, and
// swtpm as the caller without naming it.
func TestEmbedQEMUConfRunsQEMUAsTheLauncher(t *testing.T) {
	cases := []struct {
		uid, gid    int
		user, group string
	}{
		{0, 0, "root", "root"},
		{107, 107, "+107", "+107"},
		{107, 0, "+107", "+0"},
		{1000, 2000, "+1000", "+2000"},
	}
	for _, c := range cases {
		conf := embedQEMUConf(c.uid, c.gid)
		for key, want := range map[string]string{"user": c.user, "group": c.group} {
			if got, ok := confValue(conf, key); !ok || got != want {
				t.Errorf("uid %d gid %d: %s = %q (set %v), want %q", c.uid, c.gid, key, got, ok, want)
			}
		}
		// swtpm: root's as root; unprivileged unset, so that libvirt does
		// not call setgroups() (EPERM without CAP_SETGID).
		for _, key := range []string{"swtpm_user", "swtpm_group"} {
			got, ok := confValue(conf, key)
			if c.uid == 0 && c.gid == 0 && (!ok || got != "root") {
				t.Errorf("root: %s = %q (set %v), want root", key, got, ok)
			}
			if (c.uid != 0 || c.gid != 0) && ok {
				t.Errorf("uid %d gid %d: %s = %q, want it unset", c.uid, c.gid, key, got)
			}
		}
		// Unprivileged, libvirt must not try per-domain namespaces or cgroups.
		for key, want := range map[string]string{"namespaces": "[ ]", "cgroup_controllers": "[ ]", "dynamic_ownership": "0", "remember_owner": "0"} {
			if got, _ := confValue(conf, key); got != want {
				t.Errorf("uid %d: %s = %q, want %q", c.uid, key, got, want)
			}
		}
	}
}

// TestPrepareEmbedRootWritesTheCurrentUser checks the file the launcher
// writes names the user it runs as.
func TestPrepareEmbedRootWritesTheCurrentUser(t *testing.T) {
	root := t.TempDir()
	if err := PrepareEmbedRoot(root, ""); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "etc", "qemu.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if want := embedQEMUConf(os.Geteuid(), os.Getegid()); string(data) != want {
		t.Errorf("qemu.conf:\n%s\nwant:\n%s", data, want)
	}
}
