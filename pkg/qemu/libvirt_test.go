package qemu

import (
	"strings"
	"testing"
)

// TestEmbedQEMUConfRunsQEMUAsTheLauncher checks that the embedded driver's
// QEMU (and swtpm) run as the launcher's own user: root stays root, and a
// non-root launcher (KubeVirt's qemu user, 107) names its own IDs, since
// libvirt running unprivileged cannot chown its state folders to root.
func TestEmbedQEMUConfRunsQEMUAsTheLauncher(t *testing.T) {
	for _, tc := range []struct {
		uid, gid int
		want     []string
	}{
		{0, 0, []string{`user = "root"`, `group = "root"`, `swtpm_user = "root"`, `swtpm_group = "root"`}},
		{107, 107, []string{`user = "+107"`, `group = "+107"`, `swtpm_user = "+107"`, `swtpm_group = "+107"`}},
		{1000, 0, []string{`user = "+1000"`, `group = "root"`}},
	} {
		conf := embedQEMUConf(tc.uid, tc.gid)
		for _, w := range append(tc.want, "dynamic_ownership = 0", "remember_owner = 0", "namespaces = [ ]", "cgroup_controllers = [ ]") {
			if !strings.Contains(conf, "\n"+w+"\n") {
				t.Errorf("uid %d gid %d: qemu.conf has no line %q:\n%s", tc.uid, tc.gid, w, conf)
			}
		}
	}
}
