package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// rawDevices are the devices the raw QEMU boot gets besides the serial
// console, so that it boots what the launcher's guest boots: the ones
// KubeVirt attaches to every VMI that this VMI cannot opt out of (the
// virtio-scsi controller for hot-plug, the virtio-serial controller with
// the guest agent's port), the pod network's interface (user-mode here),
// the ISA pvpanic device the converter adds for the guest-panic fault,
// and, as libvirt 9.0 lays them out on q35, every PCI device behind a
// pcie-root-port of its own, plus the spare root port libvirt adds for
// hot-plug. The options are the ones in the domain's QEMU command line
// (the domain log under the embedded root); checkRawDevices keeps the two
// in step.
func rawDevices(qgaSocket string) []string {
	var args []string
	for i, addr := range []string{"0x1", "0x1.0x1", "0x1.0x2", "0x1.0x3"} {
		multi := ""
		if i == 0 {
			multi = `,"multifunction":true`
		}
		args = append(args, "-device", fmt.Sprintf(`{"driver":"pcie-root-port","port":%d,"chassis":%d,"id":"pci.%d","bus":"pcie.0"%s,"addr":"%s"}`, 8+i, i+1, i+1, multi, addr))
	}
	return append(args,
		"-device", `{"driver":"virtio-scsi-pci-non-transitional","id":"scsi0","bus":"pci.2","addr":"0x0"}`,
		"-device", `{"driver":"virtio-serial-pci-non-transitional","id":"virtio-serial0","bus":"pci.3","addr":"0x0"}`,
		"-netdev", `{"type":"user","id":"hostua-default"}`,
		"-device", `{"driver":"virtio-net-pci-non-transitional","netdev":"hostua-default","id":"ua-default","bus":"pci.1","addr":"0x0","romfile":""}`,
		"-chardev", "socket,id=charchannel0,path="+qgaSocket+",server=on,wait=off",
		"-device", `{"driver":"virtserialport","bus":"virtio-serial0.0","nr":1,"chardev":"charchannel0","id":"channel0","name":"org.qemu.guest_agent.0"}`,
		"-device", `{"driver":"pvpanic","ioport":1285}`,
	)
}

// checkRawDevices renders the launcher's domain (--dry-run) and fails
// when its devices are no longer the ones rawDevices gives the raw boot.
func (b *bench) checkRawDevices() error {
	dry := b.args(filepath.Join(b.dir, "cache-dry"), func(a *launcherapi.Args) { a.DryRun, a.Accel = true, launcherapi.AccelTCG })
	out, err := exec.Command(b.bin, dry...).Output()
	if err != nil {
		return fmt.Errorf("virt-launcher --dry-run: %w", err)
	}
	i := strings.Index(string(out), "<domain")
	if i < 0 {
		return fmt.Errorf("virt-launcher --dry-run printed no <domain> element")
	}
	dom := &libvirtxml.Domain{}
	if err := dom.Unmarshal(string(out[i:])); err != nil {
		return fmt.Errorf("reading the dry run's domain: %w", err)
	}
	d := dom.Devices
	var got []string
	for _, c := range d.Controllers {
		if c.Type != "usb" || c.Model != "none" {
			got = append(got, "controller "+c.Type)
		}
	}
	for _, n := range d.Interfaces {
		got = append(got, "interface "+n.Model.Type)
	}
	for _, c := range d.Channels {
		got = append(got, "channel "+c.Target.VirtIO.Name)
	}
	for _, p := range d.Panics {
		got = append(got, "panic "+p.Model)
	}
	if d.MemBalloon != nil && d.MemBalloon.Model != "none" {
		got = append(got, "memballoon "+d.MemBalloon.Model)
	}
	if n := len(d.Disks) + len(d.Graphics) + len(d.Videos) + len(d.Inputs) + len(d.RNGs) + len(d.Sounds) + len(d.Watchdogs); n > 0 {
		got = append(got, fmt.Sprintf("%d disks, displays, inputs, RNGs, sound or watchdog devices", n))
	}
	want := "controller scsi, controller virtio-serial, interface virtio-non-transitional, channel org.qemu.guest_agent.0, panic isa"
	if strings.Join(got, ", ") != want {
		return fmt.Errorf("the launcher's domain has %q, the raw QEMU boot %q: update rawDevices", strings.Join(got, ", "), want)
	}
	return nil
}
