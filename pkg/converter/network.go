package converter

import (
	"fmt"
	"net"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/admission"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// setInterfaces attaches the pod network, the only network a launcher has:
// an interface with the bridge or masquerade binding (KubeVirt's webhook
// adds a bridge one named "default") on a network with a pod source
// becomes a NIC on QEMU's user-mode network, which like a pod network gives
// the guest a private address with outbound NAT. An interface with ports
// gets each forwarded from a loopback port on the host (QEMU hostfwd); as
// libvirt 9.0 has no XML for that with the user-mode back end, such an
// interface goes onto QEMU's command line. So does every masquerade
// interface, which gets KubeVirt's masquerade addresses (libvirt's <ip> on
// a user interface sets only the network, not the gateway and the first
// DHCP address): guest 10.0.2.2/24 via 10.0.2.1, and fd10:0:2::/120 with
// fd10:0:2::1 as the router (slirp has no DHCPv6 addresses, so a guest
// takes fd10:0:2::2 statically, as KubeVirt's cloud images configure it).
// Like KubeVirt, virtio NICs are virtio-non-transitional (or transitional
// when useVirtioTransitional is set), carry the alias ua-NAME and have no
// option ROM. With tap set (a pod whose network virt-handler set up), the
// interface is instead the ethernet one KubeVirt's launcher renders
// (tapNIC), and ports are virt-handler's NAT rules, not forwards of ours.
func setInterfaces(dom *libvirtxml.Domain, spec *v1.VirtualMachineInstanceSpec, hostPort func(string, int) (int, error), tap *TapNIC) ([]launcherapi.PortForward, error) {
	if hostPort == nil {
		hostPort = freeLoopbackPort
	}
	networks := map[string]v1.Network{}
	for _, n := range spec.Networks {
		networks[n.Name] = n
	}
	used := map[string]bool{}
	var forwards []launcherapi.PortForward
	cmdlineNICs := 0
	for i, iface := range spec.Domain.Devices.Interfaces {
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		// The name goes into QEMU's -netdev and -device options and the
		// MAC address into -device: only what admission allows, the MAC
		// address as parsed.
		if msg := admission.InterfaceNameError(iface.Name); msg != "" {
			return nil, &SpecError{Field: field + ".name", Msg: launcherapi.Quote(iface.Name) + ": " + msg}
		}
		mac, err := nicMAC(iface.MacAddress, field)
		if err != nil {
			return nil, err
		}
		n, ok := networks[iface.Name]
		if !ok {
			return nil, &SpecError{Field: field + ".name", Msg: fmt.Sprintf("no network named %s in spec.networks", launcherapi.Quote(iface.Name))}
		}
		if err := checkBinding(iface, n, field); err != nil {
			return nil, err
		}
		model, qemuModel, err := nicModel(iface, spec, field)
		if err != nil {
			return nil, err
		}
		used[n.Name] = true
		if tap != nil {
			dom.Devices.Interfaces = append(dom.Devices.Interfaces, tapNIC(iface, model, mac, *tap))
			continue
		}
		if len(iface.Ports) == 0 && iface.Masquerade == nil {
			dom.Devices.Interfaces = append(dom.Devices.Interfaces, userNIC(iface, model, mac))
			continue
		}
		netdev, ifaceForwards, err := forwardedNetdev(iface, field, hostPort)
		if err != nil {
			return nil, err
		}
		forwards = append(forwards, ifaceForwards...)
		addCmdlineNIC(dom, iface, qemuModel, netdev, mac, cmdlineNICs)
		cmdlineNICs++
	}
	for _, n := range spec.Networks {
		if !used[n.Name] {
			return nil, &SpecError{Field: fmt.Sprintf("spec.networks[name=%s]", n.Name), Msg: "no interface in spec.domain.devices.interfaces uses this network"}
		}
	}
	return forwards, nil
}

// nicMAC is the interface's MAC address as parsed, in canonical form
// (lower-case hex, ':'), or "" for none: never the manifest's text.
func nicMAC(s, field string) (string, error) {
	if msg := admission.MACError(s); msg != "" {
		return "", &SpecError{Field: field + ".macAddress", Msg: launcherapi.Quote(s) + ": " + msg}
	}
	if s == "" {
		return "", nil
	}
	mac, err := net.ParseMAC(s)
	if err != nil {
		return "", &SpecError{Field: field + ".macAddress", Msg: launcherapi.Quote(s) + ": " + err.Error()}
	}
	return mac.String(), nil
}

// checkBinding refuses an interface on anything but the pod network, or
// with a binding other than bridge and masquerade.
func checkBinding(iface v1.Interface, n v1.Network, field string) error {
	if n.Pod == nil {
		kind := "multus"
		if n.Multus == nil {
			kind = "this network type"
		}
		return &SpecError{Field: fmt.Sprintf("spec.networks[name=%s]", n.Name), Msg: kind + " is not supported: only the pod network is (one machine has no other networks)"}
	}
	b := iface.InterfaceBindingMethod
	switch {
	case b.SRIOV != nil:
		return &SpecError{Field: field + ".sriov", Msg: "is not supported: only the bridge and masquerade bindings are"}
	case b.DeprecatedSlirp != nil, b.DeprecatedPasst != nil, b.DeprecatedMacvtap != nil:
		return &SpecError{Field: field, Msg: "this deprecated binding is not supported: only the bridge and masquerade bindings are"}
	case iface.Binding != nil:
		return &SpecError{Field: field + ".binding", Msg: "network binding plugins are not supported: only the bridge and masquerade bindings are"}
	}
	return nil
}

// nicModel is the interface's model as libvirt and as QEMU name it;
// virtio becomes virtio-non-transitional (or transitional when
// useVirtioTransitional is set).
func nicModel(iface v1.Interface, spec *v1.VirtualMachineInstanceSpec, field string) (model, qemuModel string, err error) {
	model = iface.Model
	if model == "" {
		model = "virtio"
	}
	qemuModel, ok := map[string]string{"virtio": "virtio-net-pci", "e1000": "e1000", "e1000e": "e1000e", "rtl8139": "rtl8139"}[model]
	if !ok {
		return "", "", &SpecError{Field: field + ".model", Msg: fmt.Sprintf("%s is not supported (allowed: virtio, e1000, e1000e, rtl8139)", launcherapi.Quote(model))}
	}
	if model == "virtio" {
		model = "virtio-non-transitional"
		if t := spec.Domain.Devices.UseVirtioTransitional; t != nil && *t {
			model = "virtio-transitional"
		}
		qemuModel = strings.Replace(model, "virtio", "virtio-net-pci", 1)
	}
	return model, qemuModel, nil
}

// userNIC is a libvirt user-network interface: a bridge interface without
// forwarded ports; mac is the parsed MAC address, or "".
func userNIC(iface v1.Interface, model, mac string) libvirtxml.DomainInterface {
	nic := libvirtxml.DomainInterface{
		Source: &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}},
		Model:  &libvirtxml.DomainInterfaceModel{Type: model},
		Alias:  &libvirtxml.DomainAlias{Name: "ua-" + iface.Name},
		ROM:    &libvirtxml.DomainROM{Enabled: "no"},
	}
	if mac != "" {
		nic.MAC = &libvirtxml.DomainInterfaceMAC{Address: mac}
	}
	return nic
}

// TapNIC is the pod's side of a network virt-handler set up: the tap
// device its phase 1 made (tap0 for the pod network) and the pod's eth0,
// whose MTU and MAC address KubeVirt's launcher gives the guest's NIC.
type TapNIC struct {
	// Device is the tap device's name.
	Device string
	// MTU is eth0's; 0 leaves it to libvirt.
	MTU int
	// MAC is eth0's address, used when the VMI's interface names none.
	MAC string
}

// tapNIC is the interface KubeVirt v1.6.0's launcher renders for the
// bridge and masquerade bindings (its converter's ethernet type, then its
// TapLibvirtSpecGenerator): type ethernet on the existing tap device,
// managed='no' (libvirt opens it and creates nothing), eth0's MTU, the
// VMI's MAC address (mac, parsed) or else eth0's.
func tapNIC(iface v1.Interface, model, mac string, tap TapNIC) libvirtxml.DomainInterface {
	nic := libvirtxml.DomainInterface{
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Target: &libvirtxml.DomainInterfaceTarget{Dev: tap.Device, Managed: "no"},
		Model:  &libvirtxml.DomainInterfaceModel{Type: model},
		Alias:  &libvirtxml.DomainAlias{Name: "ua-" + iface.Name},
		ROM:    &libvirtxml.DomainROM{Enabled: "no"},
	}
	if tap.MTU > 0 {
		nic.MTU = &libvirtxml.DomainInterfaceMTU{Size: uint(tap.MTU)}
	}
	switch {
	case mac != "":
		nic.MAC = &libvirtxml.DomainInterfaceMAC{Address: mac}
	case tap.MAC != "":
		nic.MAC = &libvirtxml.DomainInterfaceMAC{Address: tap.MAC}
	}
	return nic
}

// forwardedNetdev is QEMU's -netdev for an interface that forwards ports
// or masquerades, with a loopback host port chosen for each port.
func forwardedNetdev(iface v1.Interface, field string, hostPort func(string, int) (int, error)) (string, []launcherapi.PortForward, error) {
	var forwards []launcherapi.PortForward
	netdev := "user,id=ua-" + iface.Name
	if iface.Masquerade != nil {
		netdev += "," + MasqueradeNetdev
	}
	for j, p := range iface.Ports {
		pf := fmt.Sprintf("%s.ports[%d]", field, j)
		proto := strings.ToUpper(p.Protocol)
		if proto == "" {
			proto = "TCP"
		}
		if proto != "TCP" && proto != "UDP" {
			return "", nil, &SpecError{Field: pf + ".protocol", Msg: fmt.Sprintf("%s is not supported (allowed: TCP, UDP)", launcherapi.Quote(p.Protocol))}
		}
		if p.Port < 1 || p.Port > 65535 {
			return "", nil, &SpecError{Field: pf + ".port", Msg: fmt.Sprintf("%d is not a port (1-65535)", p.Port)}
		}
		hp, err := hostPort(proto, int(p.Port))
		if err != nil {
			return "", nil, &SpecError{Field: pf, Msg: fmt.Sprintf("choosing a host port: %v", err)}
		}
		forwards = append(forwards, launcherapi.PortForward{Interface: iface.Name, Name: p.Name, Protocol: proto, GuestPort: int(p.Port), HostAddress: "127.0.0.1", HostPort: hp})
		netdev += fmt.Sprintf(",hostfwd=%s:127.0.0.1:%d-:%d", strings.ToLower(proto), hp, p.Port)
	}
	return netdev, forwards, nil
}

// addCmdlineNIC puts the n-th (from 0) command-line NIC on QEMU's command
// line: its -netdev and its -device. Every value in them is the
// converter's own or checked: the model from a fixed table, the name by
// admission.InterfaceNameError (no ',' or '='), mac parsed, ports numbers
// and TCP/UDP.
func addCmdlineNIC(dom *libvirtxml.Domain, iface v1.Interface, qemuModel, netdev, mac string, n int) {
	// libvirt does not know this device, so it must not pick its PCI
	// slot: slots from 0x1a down on the root bus are ones libvirt
	// fills last (it counts up from slot 1) and q35 leaves free when
	// there is no USB or sound controller.
	bus := "pci.0"
	if strings.Contains(dom.OS.Type.Machine, "q35") {
		bus = "pcie.0"
	}
	device := fmt.Sprintf("%s,netdev=ua-%s,id=ua-%s,romfile=,bus=%s,addr=%#x", qemuModel, iface.Name, iface.Name, bus, 0x1a-n)
	if mac != "" {
		device += ",mac=" + mac
	}
	if dom.QEMUCommandline == nil {
		dom.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{}
	}
	dom.QEMUCommandline.Args = append(dom.QEMUCommandline.Args,
		libvirtxml.DomainQEMUCommandlineArg{Value: "-netdev"}, libvirtxml.DomainQEMUCommandlineArg{Value: netdev},
		libvirtxml.DomainQEMUCommandlineArg{Value: "-device"}, libvirtxml.DomainQEMUCommandlineArg{Value: device})
}

// MasqueradeNetdev are the QEMU user-network options that give a
// masquerade interface KubeVirt's addresses.
const MasqueradeNetdev = "net=10.0.2.0/24,host=10.0.2.1,dhcpstart=10.0.2.2,ipv6-net=fd10:0:2::/120,ipv6-host=fd10:0:2::1"

// freeLoopbackPort asks the kernel for a free loopback port of protocol.
// QEMU binds it moments later; another process taking it in between makes
// the start fail, not misroute.
func freeLoopbackPort(protocol string, _ int) (int, error) {
	if protocol == "UDP" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
