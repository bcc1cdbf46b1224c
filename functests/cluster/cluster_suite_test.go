package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/ctlharness"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "KubeVirt cluster lane", Label("cluster"))
}

var (
	client kubecli.KubevirtClient
	// lite is the cluster-lite stack this suite brought up; nil when
	// KUBECONFIG points at another cluster.
	lite *liteStack
	// bins are our own binaries, for the differential half (our
	// virt-controller runs on this machine whichever cluster is used).
	bins ctlharness.Binaries
	// artifacts receives logs worth keeping.
	artifacts string
)

var _ = BeforeSuite(func() {
	repo := built.Root()
	var err error
	bins, err = ctlharness.Built()
	Expect(err).NotTo(HaveOccurred(), "the cluster lane runs our binaries")
	artifacts = built.Path("artifacts", "cluster")
	Expect(os.MkdirAll(artifacts, 0o755)).To(Succeed())
	_, err = os.Stat(filepath.Join(bins.ImageDir, "images.json"))
	Expect(err).NotTo(HaveOccurred(), "the cluster lane boots the test guest: run `make images`")

	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		By("bringing up cluster-lite: etcd, kube-apiserver, KubeVirt's virt-controller and virt-api, and our node agent")
		lite = startLite(repo)
		kubeconfig = lite.kubeconfig
	}
	client, err = kubecli.GetKubevirtClientFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred(), "KUBECONFIG %s gives no client", kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = client.VirtualMachine(namespace()).List(ctx, metav1.ListOptions{Limit: 1})
	Expect(err).NotTo(HaveOccurred(), "the cluster at KUBECONFIG %s does not serve KubeVirt VirtualMachines", kubeconfig)
})

var _ = AfterSuite(func() {
	// The lane's own stack stops in a cleanup node, which runs after this
	// node even when a check of the virt-handler stack's tear-down fails
	// it: a failed check once left the lane's stack running, holding the
	// suites' lock through its inherited descriptor.
	if lite != nil {
		DeferCleanup(lite.stop)
	}
	stopVirtHandlerStack()
})

// liteStack is a running "clusterlite up".
type liteStack struct {
	proc       *spawn.Process
	stateDir   string
	kubeconfig string
	server     string
	logPath    string
	pids       []int
	started    time.Time
	// netns is the file of the stack's network namespace (NETNS=).
	netns string
	// node is the node's name where KubeVirt's virt-handler plays it.
	node string
	// kubeletKubeconfig is the node agent's kubelet identity
	// (KUBELET_KUBECONFIG=), printed only where KubeVirt's virt-handler
	// plays the node and the agent only kubelet.
	kubeletKubeconfig string
	// tmpBefore is what /tmp held before the stack started, and
	// netBefore the host namespace's network configuration.
	tmpBefore map[string]bool
	netBefore string
	// volumesBefore are podman's dangling volumes before the stack
	// started (nil without podman).
	volumesBefore map[string]bool
}

// tmpEntries lists the names in the system's temporary folder.
func tmpEntries() map[string]bool {
	entries, err := os.ReadDir(os.TempDir())
	Expect(err).NotTo(HaveOccurred())
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// startLite runs "clusterlite up" on a fresh state folder and waits until
// it says the stack is ready. Its upstream binaries (etcd, kube-apiserver,
// KubeVirt's virt-controller and virt-api) come from $CLUSTERLITE_BIN_DIR,
// by default the repository's _build/clusterlite/bin (KubeVirt v1.6.0);
// `make clusterlite KUBEVIRT_VERSION=vX.Y.Z` builds another release into
// _build/clusterlite/kubevirt-vX.Y.Z/bin.
func startLite(repo string) *liteStack {
	binDir := liteBinDir()
	for _, p := range []string{filepath.Join(built.BinDir(), "clusterlite"), filepath.Join(binDir, "kube-apiserver"), filepath.Join(binDir, "virt-controller")} {
		_, err := os.Stat(p)
		Expect(err).NotTo(HaveOccurred(), "cluster-lite is not built in %s (CLUSTERLITE_BIN_DIR): run `make clusterlite` "+
			"(KUBEVIRT_VERSION=vX.Y.Z for another release), or set KUBECONFIG to use another cluster", binDir)
	}
	By("cluster-lite's upstream binaries from " + binDir)
	before := tmpEntries()
	s := runLite(binDir, "clusterlite.log", liteArgs()...)
	s.tmpBefore = before
	return s
}

// runLite starts "clusterlite up" with the lane's binaries, a new state
// folder and args, its log in the artifacts as logName, and waits until it
// prints NETNS= and KUBECONFIG=.
func runLite(binDir, logName string, args ...string) *liteStack {
	state, err := os.MkdirTemp("", "clusterlite-lane-")
	Expect(err).NotTo(HaveOccurred())
	s := &liteStack{stateDir: state, logPath: filepath.Join(artifacts, logName), started: time.Now(), netBefore: hostNetwork(), volumesBefore: danglingVolumes()}
	ready := make(chan string, 1)
	netns := make(chan string, 1)
	kubelet := make(chan string, 1)
	out := spawn.NewLineWriter(func(b []byte) {
		line := string(b)
		fmt.Fprintln(GinkgoWriter, "clusterlite: "+line)
		if k, ok := strings.CutPrefix(line, "KUBECONFIG="); ok {
			ready <- k
		}
		if n, ok := strings.CutPrefix(line, "NETNS="); ok {
			netns <- n
		}
		if k, ok := strings.CutPrefix(line, "KUBELET_KUBECONFIG="); ok {
			kubelet <- k
		}
	})
	s.proc, err = spawn.Start(spawn.Spec{Path: filepath.Join(built.BinDir(), "clusterlite"), Args: append([]string{"up", "--state-dir", state, "--bin-dir", binDir,
		"--launcher", bins.Launcher, "--image-dir", bins.ImageDir, "--launcher-image", launcherImage}, args...), Stdout: out, StderrFile: s.logPath, Truncate: true})
	Expect(err).NotTo(HaveOccurred())
	select {
	case s.kubeconfig = <-ready:
	case <-s.proc.Done():
		Fail("clusterlite up exited before the stack was ready; its log: " + s.logPath + "\n" + tail(s.logPath, 3000))
	case <-time.After(5 * time.Minute):
		s.stop()
		Fail("cluster-lite was not ready within 5 minutes; its log: " + s.logPath + "\n" + tail(s.logPath, 3000))
	}
	s.netns = <-netns // printed before KUBECONFIG=
	select {
	case s.kubeletKubeconfig = <-kubelet: // printed before NETNS=, when at all
	default:
	}
	fmt.Fprintf(GinkgoWriter, "cluster-lite ready in %s, network namespace %s\n", time.Since(s.started).Round(100*time.Millisecond), s.netns)
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	for _, c := range cfg.Clusters {
		s.server = c.Server
	}
	s.pids = readPIDs(filepath.Join(state, "pids"))
	return s
}

// stop ends "clusterlite up" with SIGTERM and checks that it leaves
// nothing behind: no process it started, no listening port, no folder, no
// network namespace, and the host's network as it was before.
func (s *liteStack) stop() {
	begin := time.Now()
	st, err := s.proc.Stop(context.Background(), 3*time.Minute)
	Expect(err).NotTo(HaveOccurred())
	Expect(st.Killed).To(BeFalse(), "clusterlite up did not stop within 3 minutes of SIGTERM")
	fmt.Fprintf(GinkgoWriter, "cluster-lite stopped in %s\n", time.Since(begin).Round(100*time.Millisecond))
	Expect(st.Exit.Code).To(Equal(0), "clusterlite up did not stop cleanly: %s\nits log %s ends:\n%s", failures(s.logPath), s.logPath, tail(s.logPath, 3000))
	Expect(s.pids).NotTo(BeEmpty(), "clusterlite wrote no pids file")
	for _, pid := range s.pids {
		Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "process %d of cluster-lite is still alive", pid)
	}
	if u, err := url.Parse(s.server); err == nil {
		_, err := net.DialTimeout("tcp", u.Host, time.Second)
		Expect(err).To(HaveOccurred(), "the API server's port %s still answers", u.Host)
	}
	_, err = os.Stat(s.stateDir)
	Expect(os.IsNotExist(err)).To(BeTrue(), "state folder %s left behind", s.stateDir)
	s.checkNetworkGone()
	checkNoContainers()
	s.checkNoVolumes()
	var left []string
	for name := range tmpEntries() {
		if !s.tmpBefore[name] && ours(name) {
			left = append(left, name)
		}
	}
	Expect(left).To(BeEmpty(), "left in %s by the stack or the suite", os.TempDir())
}

// tmpPrefixes are the names the stack and this suite give what they make
// in /tmp: virt-api's certificate folders (certsdir*), cluster-lite's
// state folder and the lane's work folders. Other jobs on the machine make
// folders meanwhile (another suite's crashloop-lane-*, for one); those are
// not this lane's to answer for.
var tmpPrefixes = []string{"certsdir", "clusterlite", "cluster-lane"}

// ours reports whether a /tmp entry has a name the stack or the suite uses.
func ours(name string) bool {
	for _, p := range tmpPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func readPIDs(path string) []int {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred(), "cluster-lite's pids file")
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// failures returns the error lines of a cluster-lite log (slog's
// level=ERROR, which "clusterlite failed" and every tear-down step's
// error are), so that a failed stop names its cause before the log's tail.
func failures(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(its log cannot be read: " + err.Error() + ")"
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "(no level=ERROR line in its log)"
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// liteBinDir is where cluster-lite's upstream binaries are.
func liteBinDir() string { return envOr("CLUSTERLITE_BIN_DIR", built.Path("clusterlite", "bin")) }

func namespace() string { return envOr("CLUSTER_LANE_NAMESPACE", "default") }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
