package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// PodNetwork is kubelet's pod network in kubelet-only mode, what a CNI
// plugin gives each pod under a real kubelet: an eth0 in the pod's
// sandbox network namespace, one end of a veth pair whose other end is on
// a bridge with the gateway address, and an address of the subnet for
// the pod (status.podIP). The bridge lives in the stack's network
// namespace, never in the host's: every `ip` call runs with nsenter in
// the stack's or the pod's namespace, after a check that the namespace
// is not the one the node runs in (the host's). It is plain iproute2,
// two `ip -batch` runs per pod, with no daemon and no state on disk; the
// addresses are kept here, released when the pod goes.
type PodNetwork struct {
	// NetNS is the stack's network namespace file as the node namespace
	// sees it (clusterlite.Node.NetNS), where the bridge is made.
	NetNS string
	// Bridge is the bridge's name (DefaultPodBridge when empty).
	Bridge string
	// Subnet is the pods' subnet (DefaultPodSubnet when invalid); its
	// first address is the gateway, on the bridge.
	Subnet netip.Prefix

	mu    sync.Mutex
	byUID map[types.UID]netip.Addr
	used  map[netip.Addr]bool
}

// The pod network's defaults.
const (
	DefaultPodBridge = "clpods0"
	// vethPrefix begins the name of every pod's host-side veth, on the
	// bridge: the prefix and the pod address's offset in the subnet.
	vethPrefix = "clpv"
)

// DefaultPodSubnet is the pods' subnet when PodNetwork.Subnet is unset.
var DefaultPodSubnet = netip.MustParsePrefix("10.244.0.0/24")

func (n *PodNetwork) bridge() string {
	if n.Bridge == "" {
		return DefaultPodBridge
	}
	return n.Bridge
}

func (n *PodNetwork) subnet() netip.Prefix {
	if !n.Subnet.IsValid() {
		return DefaultPodSubnet
	}
	return n.Subnet.Masked()
}

// Gateway is the bridge's address, the pods' default route.
func (n *PodNetwork) Gateway() netip.Addr { return n.subnet().Addr().Next() }

// allocate gives uid an address of the subnet, the same one again for
// the same uid, from the gateway's next up to the last before broadcast.
func (n *PodNetwork) allocate(uid types.UID) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byUID == nil {
		n.byUID, n.used = map[types.UID]netip.Addr{}, map[netip.Addr]bool{}
	}
	if a, ok := n.byUID[uid]; ok {
		return a, nil
	}
	p := n.subnet()
	for a := n.Gateway().Next(); p.Contains(a) && p.Contains(a.Next()); a = a.Next() {
		if !n.used[a] {
			n.used[a], n.byUID[uid] = true, a
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod network %s: no free address for pod %s", p, uid)
}

// release gives uid's address back; it reports the address it had.
func (n *PodNetwork) release(uid types.UID) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.byUID[uid]
	if ok {
		delete(n.byUID, uid)
		delete(n.used, a)
	}
	return a, ok
}

// vethName is the host-side veth of the pod with address a: the prefix
// and a's offset in the subnet, unique while a is allocated (at most 15
// bytes, IFNAMSIZ).
func (n *PodNetwork) vethName(a netip.Addr) string {
	base := n.subnet().Addr().As16()
	b := a.As16()
	off := 0
	for i := 12; i < 16; i++ {
		off = off<<8 | int(b[i]-base[i])
	}
	return vethPrefix + strconv.Itoa(off)
}

// notHost is the shell guard every script begins with: it stops (exit
// 3) unless each namespace file names a network namespace other than the
// one the script runs in, which is the node's and so the host's.
func notHost(files ...string) string {
	var b strings.Builder
	b.WriteString("set -e\nhost=$(stat -L -c %d:%i /proc/self/ns/net)\n")
	for _, f := range files {
		fmt.Fprintf(&b, "ns=$(stat -L -c %%d:%%i %s)\n[ \"$ns\" != \"$host\" ] || { echo %s is the host\\'s network namespace >&2; exit 3; }\n", shellQuote(f), shellQuote(f))
	}
	return b.String()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// in is a script line that runs `ip -batch` in the namespace file ns
// with the given commands.
func in(ns string, cmds ...string) string {
	return fmt.Sprintf("nsenter --net=%s ip -batch - <<'EOF'\n%s\nEOF\n", shellQuote(ns), strings.Join(cmds, "\n"))
}

// setupScript makes the bridge with the gateway address, up, in the
// stack's namespace (a bridge left by an earlier agent is made again).
func (n *PodNetwork) setupScript() string {
	p := n.subnet()
	return notHost(n.NetNS) +
		fmt.Sprintf("nsenter --net=%s ip link del %s 2>/dev/null || true\n", shellQuote(n.NetNS), n.bridge()) +
		in(n.NetNS, "link add "+n.bridge()+" type bridge",
			fmt.Sprintf("addr add %s/%d dev %s", n.Gateway(), p.Bits(), n.bridge()),
			"link set "+n.bridge()+" up")
}

// attachScript gives the sandbox (node-namespace PID pid) its eth0 with
// address a, lo up and the default route through the gateway.
func (n *PodNetwork) attachScript(pid string, a netip.Addr) string {
	podNS := "/proc/" + pid + "/ns/net"
	v := n.vethName(a)
	return notHost(n.NetNS, podNS) +
		in(n.NetNS, "link add "+v+" type veth peer name eth0 netns "+pid,
			"link set "+v+" master "+n.bridge()+" up") +
		in(podNS, "link set lo up",
			fmt.Sprintf("addr add %s/%d dev eth0", a, n.subnet().Bits()),
			"link set eth0 up",
			"route add default via "+n.Gateway().String())
}

// detachScript removes the pod's host-side veth (its peer goes with it),
// if it is still there: it also goes with the sandbox's namespace.
func (n *PodNetwork) detachScript(a netip.Addr) string {
	return notHost(n.NetNS) + fmt.Sprintf("nsenter --net=%s ip link del %s 2>/dev/null || true\n", shellQuote(n.NetNS), n.vethName(a))
}

// teardownScript removes every host-side veth of ours left on the
// bridge, then the bridge and its address.
func (n *PodNetwork) teardownScript() string {
	ns := shellQuote(n.NetNS)
	return notHost(n.NetNS) +
		fmt.Sprintf("for v in $(nsenter --net=%s ip -o link show master %s 2>/dev/null | sed -n 's/^[0-9]*: \\(%s[0-9]*\\)@.*/\\1/p'); do nsenter --net=%s ip link del \"$v\" || true; done\n", ns, n.bridge(), vethPrefix, ns) +
		fmt.Sprintf("nsenter --net=%s ip link del %s 2>/dev/null || true\n", ns, n.bridge())
}

// runner runs argv inside the node namespace to completion.
type runner func(ctx context.Context, argv ...string) (string, error)

// setup makes the bridge; the agent calls it once before any pod.
func (n *PodNetwork) setup(ctx context.Context, run runner) error {
	if n.NetNS == "" {
		return errors.New("pod network: no stack network namespace")
	}
	if _, err := run(ctx, "sh", "-c", n.setupScript()); err != nil {
		return fmt.Errorf("pod network: making bridge %s in %s: %w", n.bridge(), n.NetNS, err)
	}
	return nil
}

// attach gives the pod's sandbox (its node-namespace PID) its eth0 and
// returns the pod's address.
func (n *PodNetwork) attach(ctx context.Context, run runner, uid types.UID, pid string) (netip.Addr, error) {
	if _, err := strconv.Atoi(pid); err != nil {
		return netip.Addr{}, fmt.Errorf("pod network: sandbox PID %q: %w", pid, err)
	}
	a, err := n.allocate(uid)
	if err != nil {
		return netip.Addr{}, err
	}
	if _, err := run(ctx, "sh", "-c", n.attachScript(pid, a)); err != nil {
		n.detach(ctx, run, uid)
		return netip.Addr{}, fmt.Errorf("pod network: eth0 %s for pod %s: %w", a, uid, err)
	}
	return a, nil
}

// detach removes the pod's veth and releases its address; nothing to do
// for a pod without one.
func (n *PodNetwork) detach(ctx context.Context, run runner, uid types.UID) error {
	a, ok := n.release(uid)
	if !ok {
		return nil
	}
	if _, err := run(ctx, "sh", "-c", n.detachScript(a)); err != nil {
		return fmt.Errorf("pod network: removing the veth of pod %s: %w", uid, err)
	}
	return nil
}

// teardown removes what is left: pod veths and the bridge.
func (n *PodNetwork) teardown(ctx context.Context, run runner) error {
	if _, err := run(ctx, "sh", "-c", n.teardownScript()); err != nil {
		return fmt.Errorf("pod network: removing bridge %s: %w", n.bridge(), err)
	}
	n.mu.Lock()
	n.byUID, n.used = nil, nil
	n.mu.Unlock()
	return nil
}
