package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// expectNonRootLaunch checks that the QEMU of VMI namespace/name, and
// every process of the container it runs in (its PID namespace: the
// monitor or catatonit, our launcher's stages, QEMU), run as KubeVirt's
// non-root launcher user and group, qemu (107), read from /proc/PID/status
// (real, effective, saved and filesystem IDs). It returns what it saw,
// for the spec's report.
func expectNonRootLaunch(namespace, name string) string {
	pids := qemu.FindQEMU(namespace+"_"+name, "")
	Expect(pids).To(HaveLen(1), "one QEMU of %s/%s", namespace, name)
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pids[0]))
	Expect(err).NotTo(HaveOccurred())
	files, _ := filepath.Glob("/proc/[0-9]*/status")
	var seen []string
	for _, f := range files {
		if theirs, err := os.Readlink(filepath.Join(filepath.Dir(f), "ns", "pid")); err != nil || theirs != ns {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue // ended meanwhile
		}
		fields := map[string]string{}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		proc := fields["Name"] + "(" + filepath.Base(filepath.Dir(f)) + ")"
		Expect(fields["Uid"]).To(Equal("107 107 107 107"), "Uid of %s in the compute container of %s", proc, name)
		Expect(fields["Gid"]).To(Equal("107 107 107 107"), "Gid of %s in the compute container of %s", proc, name)
		seen = append(seen, proc+" Uid "+fields["Uid"])
	}
	sort.Strings(seen)
	Expect(strings.Join(seen, " ")).To(ContainSubstring("qemu-system"))
	return strings.Join(seen, "; ")
}
