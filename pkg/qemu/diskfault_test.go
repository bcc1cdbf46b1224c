package qemu

import (
	"testing"

	"libvirt.org/go/libvirtxml"
)

func TestCmdlineSlot(t *testing.T) {
	q35 := &libvirtxml.Domain{OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Machine: "q35"}}}
	if bus, slot := cmdlineSlot(q35); bus != "pcie.0" || slot != 0x1a {
		t.Errorf("an empty command line on q35: got %s %#x, want pcie.0 0x1a", bus, slot)
	}
	q35.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{
		{Value: "-netdev"}, {Value: "user,id=ua-default"},
		{Value: "-device"}, {Value: "virtio-net-pci,netdev=ua-default,bus=pcie.0,addr=0x1a"},
	}}
	if bus, slot := cmdlineSlot(q35); bus != "pcie.0" || slot != 0x19 {
		t.Errorf("below a forwarded-port NIC: got %s %#x, want pcie.0 0x19", bus, slot)
	}
	pc := &libvirtxml.Domain{OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Machine: "pc"}}}
	if bus, _ := cmdlineSlot(pc); bus != "pci.0" {
		t.Errorf("pc's root bus: got %s, want pci.0", bus)
	}
}
