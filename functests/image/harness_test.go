package image_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/uuid"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/launchharness"
	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/kvmprobe"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/memcg"
)

// nodeKVM reports whether the node has KVM that runs ordinary guests (the
// launcher's own rule), so that the container gets /dev/kvm.
func nodeKVM() bool {
	kvm, _, err := kvmprobe.Probe()
	Expect(err).NotTo(HaveOccurred())
	return kvm
}

// Container is one `podman run` of the launcher image on one VMI, run
// through the suites' launcher harness: its stdout is the launcher's.
type Container struct {
	*launchharness.Launch
	// ID is the container's ID, from podman's --cidfile.
	ID string
}

// podman runs a podman command and returns its combined output.
func podman(args ...string) (string, error) {
	out, err := exec.Command("podman", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// runArgs is the podman command line of the README: runc (crun refuses
// this host's hybrid cgroups), the harness's stdout and stderr handed to
// the container as they are (log driver passthrough: no conmon relay
// between the launcher and the final event), explicit rlimits (the
// sandbox lacks CAP_SYS_RESOURCE to raise them), --init (catatonit as PID 1), no network
// (the test VMI has no interface), the guest images and the manifest
// read-only, the launch folder as the log folder (so the console log is
// the harness's) and the capability cache, both handed to the image's
// user (":U", as kubelet hands a pod's emptyDir to its fsGroup: the image
// runs as KubeVirt's qemu, 107), no privileges beyond the defaults, and /dev/kvm only
// where the node has usable KVM (these nodes have only PVM, so TCG).
func runArgs(dir string, kvm bool, extra []string) []string {
	args := []string{"run", "--rm", "--runtime", "runc", "--log-driver", "passthrough", "--init", "--network", "none",
		"--cidfile", filepath.Join(dir, "cid"),
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
		"-v", built.ImageDir() + ":/usr/share/crashloop/images:ro",
		"-v", filepath.Join(dir, "vmi.yaml") + ":/vmi/vmi.yaml:ro",
		"-v", dir + ":" + launcherapi.DefaultConsoleDir + ":U",
		"-v", capsCache + ":" + launcherapi.DefaultCacheDir + ":U"}
	if kvm {
		args = append(args, "--device", "/dev/kvm")
	}
	args = append(args, extra...)
	launcher := launcherapi.Args{LogLevel: "debug", ConsoleLog: filepath.Join(launcherapi.DefaultConsoleDir, launcherapi.ConsoleFile),
		Manifest: "/vmi/vmi.yaml"}
	return append(append(args, Image), launcher.Build()...)
}

// Run starts the image on a fresh test-guest VMI (kernelArgs "" is the
// guest's default: it stays up) with extra podman flags, and waits for the
// container's ID. Cleanup removes the container by its ID if it is still
// there, then the harness checks that no QEMU of its domain survives.
func Run(kernelArgs string, extra ...string) *Container { return RunVMI(kernelArgs, nil, extra...) }

// RunVMI is Run with edit applied to the VMI first (nil: none).
func RunVMI(kernelArgs string, edit func(*v1.VirtualMachineInstance), extra ...string) *Container {
	uid := uuid.NewUUID()
	name := "img-" + string(uid)[:8]
	vmi := testguest.VMI(testguest.Spec{Name: name, UID: uid, KernelArgs: kernelArgs})
	if edit != nil {
		edit(vmi)
	}
	manifest, err := testguest.Manifest(vmi)
	Expect(err).NotTo(HaveOccurred())
	kvm := nodeKVM()
	c := &Container{}
	c.Launch = launchharness.Start(launchharness.Spec{Name: name, Manifest: manifest,
		Command: func(dir string) (string, []string) { return "podman", runArgs(dir, kvm, extra) },
		Stop:    func(*launchharness.Launch) { c.remove() }})
	cid := filepath.Join(c.Dir, "cid")
	Eventually(func() string {
		b, _ := os.ReadFile(cid)
		return strings.TrimSpace(string(b))
	}).WithTimeout(60*time.Second).WithPolling(50*time.Millisecond).ShouldNot(BeEmpty(), func() string { return "podman wrote no container ID; stderr:\n" + c.Log() })
	b, _ := os.ReadFile(cid)
	c.ID = strings.TrimSpace(string(b))
	return c
}

// remove removes the container if it is still there.
func (c *Container) remove() {
	if c.ID == "" {
		return
	}
	if _, err := podman("container", "exists", c.ID); err == nil {
		out, err := podman("rm", "--force", "--time", "0", c.ID)
		Expect(err).NotTo(HaveOccurred(), "removing container %s: %s", c.ID, out)
	}
}

// Kill sends sig to the container through podman.
func (c *Container) Kill(sig string) {
	out, err := podman("kill", "--signal", sig, c.ID)
	Expect(err).NotTo(HaveOccurred(), "podman kill -s %s %s: %s", sig, c.ID, out)
}

// Inspect reads one field of `podman inspect` (a Go template).
func (c *Container) Inspect(format string) string {
	out, err := podman("container", "inspect", "--format", format, c.ID)
	Expect(err).NotTo(HaveOccurred(), "podman inspect %s: %s", c.ID, out)
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func final(ev launcherapi.Event) (string, string, int) { return launchharness.Final(ev) }

// OOMKills follows the container's memory cgroup (cgroup v1:
// memory.oom_control, v2: memory.events) and returns a function that gives
// the highest oom_kill count seen: the counters go with the cgroup when
// the container ends, so they are read every 10 ms while it runs.
func (c *Container) OOMKills() func() int {
	file := memcg.CounterFile("", c.Inspect("{{.State.CgroupPath}}"))
	_, err := os.Stat(file)
	Expect(err).NotTo(HaveOccurred(), "the container's memory cgroup counters")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-c.Done(); cancel() }()
	f := memcg.Follow(ctx, file, 10*time.Millisecond)
	return func() int { n, _ := f.Most(); return n }
}

// procIDs reads the real, effective, saved and filesystem user and group
// IDs of a process from /proc/PID/status ("Uid:" and "Gid:" lines).
func procIDs(pid int) (uids, gids []string) {
	data, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 5 {
			switch f[0] {
			case "Uid:":
				uids = f[1:]
			case "Gid:":
				gids = f[1:]
			}
		}
	}
	return uids, gids
}

// nsProcs lists the processes in the PID namespace of the container's
// first process (the container's every process: catatonit, the launcher,
// its reaper, QEMU), with their command names.
func (c *Container) nsProcs() map[int]string {
	ns, err := os.Readlink("/proc/" + c.Inspect("{{.State.Pid}}") + "/ns/pid")
	Expect(err).NotTo(HaveOccurred())
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	procs := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if theirs, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && theirs == ns {
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			procs[pid] = strings.TrimSpace(string(comm))
		}
	}
	return procs
}
