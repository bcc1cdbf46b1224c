package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPodNetworkAllocatesAndReleases(t *testing.T) {
	n := &PodNetwork{Subnet: netip.MustParsePrefix("10.9.0.0/29")}
	if g := n.Gateway(); g != netip.MustParseAddr("10.9.0.1") {
		t.Fatalf("gateway %s", g)
	}
	var got []string
	for _, uid := range []types.UID{"a", "b", "c", "d", "e"} {
		a, err := n.allocate(uid)
		if err != nil {
			t.Fatalf("allocate %s: %v", uid, err)
		}
		got = append(got, a.String())
	}
	if strings.Join(got, " ") != "10.9.0.2 10.9.0.3 10.9.0.4 10.9.0.5 10.9.0.6" {
		t.Fatalf("addresses %v: want .2 to .6 (not the gateway, not the broadcast)", got)
	}
	if _, err := n.allocate("f"); err == nil {
		t.Fatal("a sixth pod got an address of a /29")
	}
	if a, _ := n.allocate("b"); a.String() != "10.9.0.3" {
		t.Fatalf("the same pod got a new address %s", a)
	}
	if a, ok := n.release("b"); !ok || a.String() != "10.9.0.3" {
		t.Fatalf("release b: %s %v", a, ok)
	}
	if a, _ := n.allocate("f"); a.String() != "10.9.0.3" {
		t.Fatalf("a released address is not given again: %s", a)
	}
	if v := n.vethName(netip.MustParseAddr("10.9.0.3")); v != "clpv3" {
		t.Fatalf("veth name %q", v)
	}
	long := &PodNetwork{Subnet: netip.MustParsePrefix("10.0.0.0/8")}
	if v := long.vethName(netip.MustParseAddr("10.255.255.254")); len(v) > 15 {
		t.Fatalf("veth name %q is longer than IFNAMSIZ allows", v)
	}
}

// TestPodNetworkScriptsRefuseTheHostNamespace: every script stops before
// any `ip` call when a namespace it would change is the one it runs in.
func TestPodNetworkScriptsRefuseTheHostNamespace(t *testing.T) {
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		t.Skip("no /proc/self/ns/net")
	}
	n := &PodNetwork{NetNS: "/proc/self/ns/net"}
	a := netip.MustParseAddr("10.244.0.2")
	for name, script := range map[string]string{"setup": n.setupScript(), "attach": n.attachScript(strconv.Itoa(os.Getpid()), a),
		"detach": n.detachScript(a), "teardown": n.teardownScript()} {
		out, err := exec.Command("sh", "-c", script).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "host's network namespace") {
			t.Errorf("%s on the host's namespace: err %v, output %q; want exit 3 from the guard", name, err, out)
		}
	}
}

// TestPodNetworkInThrowawayNamespaces runs the real scripts: a "stack"
// namespace and a "pod" namespace, each held by a sleep of its own, get
// the bridge, the veth pair, eth0's address and route, and lose them
// again; the host's links are the same before and after.
func TestPodNetworkInThrowawayNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	for _, bin := range []string{"unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s", bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hostLinks := links(t)
	holder := func() int {
		cmd := exec.Command("unshare", "--net", "sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatalf("unshare --net: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// unshare execs sleep in the new namespace: wait until it did.
		self, _ := os.Readlink("/proc/self/ns/net")
		for i := 0; i < 200; i++ {
			ns, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net")
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"); err == nil && ns != self && strings.HasSuffix(exe, "sleep") {
				return cmd.Process.Pid
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("the namespace holder did not start")
		return 0
	}
	stack, pod := holder(), holder()
	run := func(ctx context.Context, argv ...string) (string, error) {
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%v: %w: %s", argv[:2], err, out)
		}
		return string(out), nil
	}
	n := &PodNetwork{NetNS: "/proc/" + strconv.Itoa(stack) + "/ns/net"}
	if err := n.setup(ctx, run); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	a, err := n.attach(ctx, run, "pod-1", strconv.Itoa(pod))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attach took %v", time.Since(begin))
	if a.String() != "10.244.0.2" {
		t.Fatalf("first pod's address %s", a)
	}
	podNS := "/proc/" + strconv.Itoa(pod) + "/ns/net"
	if out := ipIn(t, podNS, "-4", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, "10.244.0.2/24") {
		t.Fatalf("pod's eth0: %s", out)
	}
	if out := ipIn(t, podNS, "route", "show", "default"); !strings.Contains(out, "via 10.244.0.1 dev eth0") {
		t.Fatalf("pod's default route: %s", out)
	}
	if out := ipIn(t, n.NetNS, "-o", "link", "show", "master", DefaultPodBridge); !strings.Contains(out, "clpv2@") {
		t.Fatalf("bridge ports: %s", out)
	}
	if out, err := exec.Command("nsenter", "--net="+podNS, "ping", "-c", "1", "-W", "2", "10.244.0.1").CombinedOutput(); err != nil {
		if _, lerr := exec.LookPath("ping"); lerr == nil {
			t.Fatalf("the pod does not reach its gateway: %v %s", err, out)
		}
	}
	if err := n.detach(ctx, run, "pod-1"); err != nil {
		t.Fatal(err)
	}
	if out := ipIn(t, podNS, "-o", "link"); strings.Contains(out, "eth0") {
		t.Fatalf("eth0 left after detach: %s", out)
	}
	if _, err := n.attach(ctx, run, "pod-2", strconv.Itoa(pod)); err != nil {
		t.Fatal(err)
	}
	if err := n.teardown(ctx, run); err != nil {
		t.Fatal(err)
	}
	if out := ipIn(t, n.NetNS, "-o", "link"); strings.Contains(out, DefaultPodBridge) || strings.Contains(out, vethPrefix) {
		t.Fatalf("left in the stack's namespace after teardown: %s", out)
	}
	if got := links(t); got != hostLinks {
		t.Fatalf("the host's links changed:\nbefore %s\nafter %s", hostLinks, got)
	}
}

func ipIn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "ip"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v in %s: %v %s", args, ns, err, out)
	}
	return string(out)
}

// links is the host's link names.
func links(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, f[1])
		}
	}
	return strings.Join(names, " ")
}
