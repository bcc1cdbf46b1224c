package kvdiff

import (
	"strconv"
	"strings"

	"github.com/crashloop-harness/crashloop/pkg/xmltree"
)

// A Rule rewrites both domains before they are compared. Normalizations
// remove spellings that mean the same to libvirt; substitutions remove what
// one machine does differently from a KubeVirt node on purpose. Each says
// why, and the differential lists which rules it applied.
type Rule struct {
	Name string
	Why  string
	// Apply rewrites KubeVirt's domain (kv) and ours in place.
	Apply func(kv, ours *xmltree.Node)
}

// Rules are the written list of normalizations and one-machine
// substitutions, in the order they are applied.
func Rules() []Rule {
	return append(normalizations(), substitutions()...)
}

// normalizations are the rules where both domains say the same thing in
// different words.
func normalizations() []Rule {
	return []Rule{
		{"memory-unit", "normalization: KubeVirt writes memory in bytes, we write KiB; both are read as the same size",
			func(kv, ours *xmltree.Node) {
				for _, n := range []*xmltree.Node{kv, ours} {
					for _, name := range []string{"memory", "currentMemory", "maxMemory"} {
						for _, m := range n.Find(name) {
							toBytes(m)
						}
					}
				}
			}},
		{"lifecycle-defaults", "normalization: libvirt's defaults for on_poweroff and on_crash are destroy, which we write out",
			func(kv, ours *xmltree.Node) {
				for _, n := range []*xmltree.Node{kv, ours} {
					for _, name := range []string{"on_poweroff", "on_crash"} {
						n.Remove(name, func(c *xmltree.Node) bool { return c.Text == "destroy" })
					}
				}
			}},
		{"empty-sysinfo", "normalization: KubeVirt writes empty bios, baseBoard and chassis SMBIOS tables, which libvirt ignores",
			func(kv, ours *xmltree.Node) {
				for _, n := range []*xmltree.Node{kv, ours} {
					for _, si := range n.Find("sysinfo") {
						for _, name := range []string{"bios", "baseBoard", "chassis"} {
							si.Remove(name, func(c *xmltree.Node) bool { return len(c.Children) == 0 && len(c.Attrs) == 0 && c.Text == "" })
						}
					}
				}
			}},
	}
}

// substitutions are the rules where the one-machine launcher differs from
// a cluster's on purpose: no usable KVM, no pod or its mounts, no cluster
// identity, its own console file and fault plumbing.
func substitutions() []Rule {
	return []Rule{
		{"accelerator", "substitution: this machine has no usable KVM, so the domain type is qemu (TCG), and the CPU mode host-model (which libvirt expands to the host's CPU under KVM) is left out for QEMU's stable default model",
			func(kv, ours *xmltree.Node) {
				for _, n := range []*xmltree.Node{kv, ours} {
					delete(n.Attrs, "type")
					if cpu := n.Child("cpu"); cpu != nil && cpu.Attrs["mode"] == "host-model" {
						delete(cpu.Attrs, "mode")
					}
				}
			}},
		{"kvm-enlightenments", "substitution: Hyper-V enlightenments (features/hyperv) and KVM's paravirtual clocks (kvmclock, hypervclock timers) are KVM interfaces; under TCG the launcher leaves them out and logs a note naming the field",
			func(kv, ours *xmltree.Node) {
				if f := kv.Child("features"); f != nil {
					f.Remove("hyperv", nil)
				}
				if c := kv.Child("clock"); c != nil {
					c.Remove("timer", func(t *xmltree.Node) bool { return t.Attrs["name"] == "kvmclock" || t.Attrs["name"] == "hypervclock" })
				}
			}},
		{"memory-hotplug", "substitution: KubeVirt gives a VMI of 1Gi or more memory-hotplug room as maxMemory with slots=\"0\" (maxGuest, 4x guest), which its libvirt 10.10 takes; this machine's libvirt 9.0 refuses that element (\"both maximum memory size and memory slot count must be specified\", and with slots a NUMA node), so the launcher leaves it out: the guest boots with the same memory and cannot hot-plug more, as no launch can",
			func(kv, ours *xmltree.Node) {
				kv.Remove("maxMemory", func(c *xmltree.Node) bool { return c.Attrs["slots"] == "" || c.Attrs["slots"] == "0" })
			}},
		{"identity", "substitution: the domain UUID, its copy in the SMBIOS system entry and KubeVirt's metadata element (its bookkeeping) come from the cluster (VMI UID, VM name hash)",
			func(kv, ours *xmltree.Node) {
				for _, n := range []*xmltree.Node{kv, ours} {
					n.Remove("uuid", nil)
					n.Remove("metadata", nil)
					for _, e := range n.Find("sysinfo/system/entry") {
						if e.Attrs["name"] == "uuid" {
							e.Text = "UUID"
						}
					}
				}
			}},
		{"paths", "substitution: files live in the launcher's per-VMI folder, image folder and claim folder instead of a pod's /var/run/kubevirt* mounts and the image's /usr/share/OVMF; the guest agent's socket is named in the per-VMI folder, where KubeVirt leaves it to libvirt",
			func(kv, ours *xmltree.Node) {
				replacePaths(kv)
				replacePaths(ours)
				// The guest agent's socket: libvirt's own path in a pod,
				// ours in the per-VMI folder (libvirt's under an embedded
				// root is too long for a unix socket).
				for _, n := range []*xmltree.Node{kv, ours} {
					for _, c := range n.Find("devices/channel") {
						c.Remove("source", nil)
					}
				}
			}},
		{"network-backend", "substitution: the pod network is QEMU's user-mode network on one machine (no pod, no tap, no CNI); KubeVirt plugs a tap device in the pod's network namespace. The backend (interface type, source, target, our QEMU command-line netdev) is removed; model, MAC, alias and ROM are compared, a NIC on our QEMU command line read back as an interface element",
			func(kv, ours *xmltree.Node) {
				cmdlineNICs(ours)
				for _, n := range []*xmltree.Node{kv, ours} {
					for _, i := range n.Find("devices/interface") {
						delete(i.Attrs, "type")
						for _, c := range []string{"source", "target", "backend", "ip", "portForward"} {
							i.Remove(c, nil)
						}
					}
					n.Remove("qemu:commandline", nil)
				}
			}},
		{"serial-console", "substitution: the serial console goes to a file the launcher reads; KubeVirt binds a unix socket for virt-handler's console proxy and logs it with a guest-console-log container",
			func(kv, ours *xmltree.Node) {
				for _, n := range []*xmltree.Node{kv, ours} {
					for _, s := range n.Find("devices/serial") {
						delete(s.Attrs, "type")
						s.Remove("log", nil)
						s.Remove("source", nil)
					}
					for _, c := range n.Find("devices/console") {
						delete(c.Attrs, "type")
					}
				}
			}},
		{"faults", "substitution: the launcher adds an ISA pvpanic device so that a guest panic (a fault it injects and detects) ends the domain as crashed, and leaves disk errors at libvirt's default policy (report) instead of KubeVirt's error_policy=stop, so that an injected disk error (blkdebug) reaches the guest as EIO as the fault catalog says, instead of pausing it",
			func(kv, ours *xmltree.Node) {
				if d := ours.Child("devices"); d != nil {
					d.Remove("panic", func(c *xmltree.Node) bool { return c.Attrs["model"] == "isa" })
				}
				for _, drv := range kv.Find("devices/disk/driver") {
					if drv.Attrs["error_policy"] == "stop" {
						delete(drv.Attrs, "error_policy")
					}
				}
			}},
	}
}

// Apply runs every rule on both domains.
func Apply(kv, ours *xmltree.Node) {
	for _, r := range Rules() {
		r.Apply(kv, ours)
	}
}

// cmdlineNICs reads the NICs the launcher puts on QEMU's command line
// (-device MODEL,netdev=...,id=ua-NAME,romfile=,mac=...) back as libvirt
// <interface> elements.
func cmdlineNICs(ours *xmltree.Node) {
	devices := ours.Child("devices")
	cl := ours.Child("qemu:commandline")
	if devices == nil || cl == nil {
		return
	}
	args := cl.Children
	for i := 0; i+1 < len(args); i++ {
		if args[i].Attrs["value"] != "-device" {
			continue
		}
		opts := strings.Split(args[i+1].Attrs["value"], ",")
		model := strings.Replace(opts[0], "virtio-net-pci", "virtio", 1)
		nic := &xmltree.Node{Name: "interface", Attrs: map[string]string{}}
		nic.Children = append(nic.Children, &xmltree.Node{Name: "model", Attrs: map[string]string{"type": model}})
		for _, o := range opts[1:] {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "id":
				nic.Children = append(nic.Children, &xmltree.Node{Name: "alias", Attrs: map[string]string{"name": v}})
			case "romfile":
				if v == "" {
					nic.Children = append(nic.Children, &xmltree.Node{Name: "rom", Attrs: map[string]string{"enabled": "no"}})
				}
			case "mac":
				nic.Children = append(nic.Children, &xmltree.Node{Name: "mac", Attrs: map[string]string{"address": v}})
			}
		}
		devices.Children = append(devices.Children, nic)
	}
}

func toBytes(m *xmltree.Node) {
	v, err := strconv.ParseUint(m.Text, 10, 64)
	if err != nil {
		return
	}
	mult := map[string]uint64{"": 1 << 10, "KiB": 1 << 10, "k": 1 << 10, "b": 1, "bytes": 1, "MiB": 1 << 20, "M": 1 << 20, "GiB": 1 << 30, "G": 1 << 30}
	f, ok := mult[m.Attrs["unit"]]
	if !ok {
		return
	}
	m.Text = strconv.FormatUint(v*f, 10)
	m.Attrs["unit"] = "b"
}

// replacePaths turns every absolute file path into PATH.
func replacePaths(n *xmltree.Node) {
	for k, v := range n.Attrs {
		if strings.HasPrefix(v, "/") {
			n.Attrs[k] = "PATH"
		}
	}
	if strings.HasPrefix(n.Text, "/") {
		n.Text = "PATH"
	}
	for _, c := range n.Children {
		replacePaths(c)
	}
}
