package converter

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crashloop-harness/crashloop/internal/confine"
)

// OVMF names the UEFI firmware files: code and variable-store template,
// for plain and Secure Boot.
type OVMF struct {
	Code, Vars             string
	SecureCode, SecureVars string
}

// DebianOVMF are the 4 MiB builds Debian's ovmf package ships: the plain
// firmware, and the Secure Boot one (SMM required) with Microsoft's keys
// enrolled in its variable store, as KubeVirt's images pair them.
func DebianOVMF() OVMF {
	return OVMF{
		Code:       "/usr/share/OVMF/OVMF_CODE_4M.fd",
		Vars:       "/usr/share/OVMF/OVMF_VARS_4M.fd",
		SecureCode: "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
		SecureVars: "/usr/share/OVMF/OVMF_VARS_4M.ms.fd",
	}
}

func enabledOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func featureOn(f *v1.FeatureState) bool { return f != nil && enabledOr(f.Enabled, true) }

// setFirmware sets the bootloader (SeaBIOS or OVMF with a per-VMI variable
// store) and the SMBIOS system entries (uuid, serial) KubeVirt sets.
func setFirmware(dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, opts *DomainOptions) error {
	fw := vmi.Spec.Domain.Firmware
	entries := []libvirtxml.DomainSysInfoEntry{}
	if fw != nil && dom.UUID != "" {
		entries = append(entries, libvirtxml.DomainSysInfoEntry{Name: "uuid", Value: dom.UUID})
	}
	if fw != nil && fw.Serial != "" {
		entries = append(entries, libvirtxml.DomainSysInfoEntry{Name: "serial", Value: fw.Serial})
	}
	// virt-handler's default SMBIOS (a KubeVirt CR without smbios).
	entries = append(entries,
		libvirtxml.DomainSysInfoEntry{Name: "manufacturer", Value: "KubeVirt"},
		libvirtxml.DomainSysInfoEntry{Name: "family", Value: "KubeVirt"},
		libvirtxml.DomainSysInfoEntry{Name: "product", Value: "None"},
		libvirtxml.DomainSysInfoEntry{Name: "sku"},
		libvirtxml.DomainSysInfoEntry{Name: "version"})
	dom.SysInfo = []libvirtxml.DomainSysInfo{{SMBIOS: &libvirtxml.DomainSysInfoSMBIOS{System: &libvirtxml.DomainSysInfoSystem{Entry: entries}}}}
	dom.OS.SMBios = &libvirtxml.DomainSMBios{Mode: "sysinfo"}
	if fw == nil {
		return nil
	}
	bl := fw.Bootloader
	if bl == nil {
		return nil
	}
	if bl.BIOS != nil && bl.EFI != nil {
		return &SpecError{Field: "spec.domain.firmware.bootloader", Msg: "set bios or efi, not both"}
	}
	if bl.BIOS != nil && enabledOr(bl.BIOS.UseSerial, false) {
		dom.OS.BIOS = &libvirtxml.DomainBIOS{UseSerial: "yes"}
	}
	if bl.EFI == nil {
		return nil
	}
	const field = "spec.domain.firmware.bootloader.efi"
	ovmf := opts.OVMF
	if ovmf == (OVMF{}) {
		ovmf = DebianOVMF()
	}
	secure := enabledOr(bl.EFI.SecureBoot, true) // KubeVirt: Secure Boot unless secureBoot: false
	code, vars := ovmf.Code, ovmf.Vars
	if secure {
		code, vars = ovmf.SecureCode, ovmf.SecureVars
		if f := vmi.Spec.Domain.Features; f == nil || !featureOn(f.SMM) {
			return &SpecError{Field: field + ".secureBoot", Msg: "Secure Boot needs SMM: set spec.domain.features.smm.enabled: true (as KubeVirt requires), or secureBoot: false"}
		}
		if !strings.Contains(dom.OS.Type.Machine, "q35") {
			return &SpecError{Field: field + ".secureBoot", Msg: fmt.Sprintf("Secure Boot needs a q35 machine, got %q in spec.domain.machine.type", dom.OS.Type.Machine)}
		}
	}
	for _, f := range []string{code, vars} {
		if _, err := os.Stat(f); err != nil {
			return &SpecError{Field: field, Msg: fmt.Sprintf("UEFI firmware file missing (Debian package ovmf): %v", err)}
		}
	}
	if opts.ScratchDir == "" {
		return &SpecError{Field: field, Msg: "EFI needs a per-VMI folder for its variable store (no scratch folder given)"}
	}
	// The variable store is named after the VMI, inside the per-VMI
	// folder: the name must be one path component.
	if err := confine.Name(vmi.Name); err != nil {
		return &SpecError{Field: "metadata.name", Msg: err.Error()}
	}
	nvram, err := copyVars(vars, opts.ScratchDir, vmi.Name+"_VARS.fd")
	if err != nil {
		return &SpecError{Field: field, Msg: err.Error()}
	}
	dom.OS.Loader = &libvirtxml.DomainLoader{Path: code, Readonly: "yes", Secure: yesNo(secure), Type: "pflash"}
	dom.OS.NVRam = &libvirtxml.DomainNVRam{NVRam: nvram, Template: vars}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// copyVars copies the variable store template from as the file name of
// dir, owner-only, through an os.Root of dir, and returns its path.
func copyVars(from, dir, name string) (string, error) {
	data, err := os.ReadFile(from)
	if err != nil {
		return "", fmt.Errorf("copying the UEFI variable store: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("copying the UEFI variable store: %w", err)
	}
	p, err := confine.WriteFile(dir, data, 0o600, name)
	if err != nil {
		return "", fmt.Errorf("copying the UEFI variable store: %w", err)
	}
	return p, nil
}

// setFeatures sets ACPI, APIC, SMM and the Hyper-V enlightenments. Under
// TCG the enlightenments, which QEMU offers with KVM only, are left out
// with a note.
func setFeatures(dom *libvirtxml.Domain, f *v1.Features, accel Accel, notes *[]string) {
	// ACPI is on unless the VMI turns it off: without it a guest power-off
	// only halts and the domain stays running.
	// KubeVirt turns VMware's I/O port off on amd64.
	dom.Features.VMPort = &libvirtxml.DomainFeatureState{State: "off"}
	if f == nil || f.ACPI.Enabled == nil || *f.ACPI.Enabled {
		dom.Features.ACPI = &libvirtxml.DomainFeature{}
	}
	if f == nil {
		return
	}
	if f.APIC != nil && enabledOr(f.APIC.Enabled, true) {
		dom.Features.APIC = &libvirtxml.DomainFeatureAPIC{}
		if f.APIC.EndOfInterrupt {
			dom.Features.APIC.EOI = "on"
		}
	}
	if f.SMM != nil {
		// As KubeVirt: <smm/> when on, nothing when off.
		if featureOn(f.SMM) {
			dom.Features.SMM = &libvirtxml.DomainFeatureSMM{}
		}
	}
	h := f.Hyperv
	if h == nil {
		return
	}
	if accel != AccelKVM {
		*notes = append(*notes, "spec.domain.features.hyperv: Hyper-V enlightenments need KVM; under TCG the guest runs without them")
		return
	}
	st := func(fs *v1.FeatureState) *libvirtxml.DomainFeatureState {
		if fs == nil {
			return nil
		}
		return &libvirtxml.DomainFeatureState{State: onOff(featureOn(fs))}
	}
	hv := &libvirtxml.DomainFeatureHyperV{
		Relaxed: st(h.Relaxed), VAPIC: st(h.VAPIC), VPIndex: st(h.VPIndex), Runtime: st(h.Runtime),
		Synic: st(h.SyNIC), Reset: st(h.Reset), Frequencies: st(h.Frequencies),
		ReEnlightenment: st(h.Reenlightenment), IPI: st(h.IPI), EVMCS: st(h.EVMCS),
	}
	if h.Spinlocks != nil {
		hv.Spinlocks = &libvirtxml.DomainFeatureHyperVSpinlocks{DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(enabledOr(h.Spinlocks.Enabled, true))}}
		if h.Spinlocks.Retries != nil {
			hv.Spinlocks.Retries = uint(*h.Spinlocks.Retries)
		}
	}
	if h.SyNICTimer != nil {
		hv.STimer = &libvirtxml.DomainFeatureHyperVSTimer{DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(enabledOr(h.SyNICTimer.Enabled, true))}, Direct: st(h.SyNICTimer.Direct)}
	}
	if h.VendorID != nil {
		hv.VendorId = &libvirtxml.DomainFeatureHyperVVendorId{DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(enabledOr(h.VendorID.Enabled, true))}, Value: h.VendorID.VendorID}
	}
	if h.TLBFlush != nil {
		hv.TLBFlush = &libvirtxml.DomainFeatureHyperVTLBFlush{DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(featureOn(h.TLBFlush))}}
	}
	dom.Features.HyperV = hv
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// setClock sets the clock offset and timers. The kvm and hyperv clocks are
// paravirtual clocks of KVM: under TCG they are left out with a note.
func setClock(dom *libvirtxml.Domain, c *v1.Clock, accel Accel, notes *[]string) error {
	if c == nil {
		return nil
	}
	// As KubeVirt's Convert_v1_Clock_To_api_Clock: utc resets the guest's
	// RTC adjustment unless it names an offset; the timers in its order
	// (rtc, pit, kvmclock, hpet, hypervclock).
	clock := &libvirtxml.DomainClock{Offset: "utc"}
	switch {
	case c.UTC != nil && c.Timezone != nil:
		return &SpecError{Field: "spec.domain.clock", Msg: "set utc or timezone, not both"}
	case c.Timezone != nil:
		clock.Offset, clock.TimeZone = "timezone", string(*c.Timezone)
		if _, err := os.Stat(filepath.Join("/usr/share/zoneinfo", clock.TimeZone)); err != nil || clock.TimeZone == "" {
			return &SpecError{Field: "spec.domain.clock.timezone", Msg: fmt.Sprintf("%q is not a time zone known to this host (/usr/share/zoneinfo)", clock.TimeZone)}
		}
	case c.UTC != nil && c.UTC.OffsetSeconds != nil:
		clock.Adjustment = strconv.Itoa(*c.UTC.OffsetSeconds)
	case c.UTC != nil:
		clock.Adjustment = "reset"
	}
	if t := c.Timer; t != nil {
		// field is set for KVM's paravirtual clocks, left out under TCG.
		type timer struct {
			libvirtxml.DomainTimer
			field string
		}
		var timers []timer
		if t.RTC != nil {
			timers = append(timers, timer{libvirtxml.DomainTimer{Name: "rtc", TickPolicy: string(t.RTC.TickPolicy), Track: string(t.RTC.Track), Present: yesNo(enabledOr(t.RTC.Enabled, true))}, ""})
		}
		if t.PIT != nil {
			timers = append(timers, timer{libvirtxml.DomainTimer{Name: "pit", TickPolicy: string(t.PIT.TickPolicy), Present: yesNo(enabledOr(t.PIT.Enabled, true))}, ""})
		}
		if t.KVM != nil {
			timers = append(timers, timer{libvirtxml.DomainTimer{Name: "kvmclock", Present: yesNo(enabledOr(t.KVM.Enabled, true))}, "kvm"})
		}
		if t.HPET != nil {
			timers = append(timers, timer{libvirtxml.DomainTimer{Name: "hpet", TickPolicy: string(t.HPET.TickPolicy), Present: yesNo(enabledOr(t.HPET.Enabled, true))}, ""})
		}
		if t.Hyperv != nil {
			timers = append(timers, timer{libvirtxml.DomainTimer{Name: "hypervclock", Present: yesNo(enabledOr(t.Hyperv.Enabled, true))}, "hyperv"})
		}
		for _, tm := range timers {
			if tm.field != "" && accel != AccelKVM {
				*notes = append(*notes, "spec.domain.clock.timer."+tm.field+": the "+tm.Name+" is KVM's paravirtual clock; under TCG the guest runs without it")
				continue
			}
			clock.Timer = append(clock.Timer, tm.DomainTimer)
		}
	}
	dom.Clock = clock
	return nil
}

// setDevicesExtra adds the entropy device, the vTPM and, when the VMI
// asks for it, a VGA display served by VNC on a socket in the scratch
// folder.
func setDevicesExtra(dom *libvirtxml.Domain, vmi *v1.VirtualMachineInstance, scratch string) error {
	d := &vmi.Spec.Domain.Devices
	if err := setTPM(dom, d.TPM); err != nil {
		return err
	}
	if d.Rng != nil {
		dom.Devices.RNGs = []libvirtxml.DomainRNG{{Model: virtioModel(vmi), Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}}}}
	}
	// KubeVirt's default (autoattachGraphicsDevice unset means true): a
	// VGA card with 16 MiB of video memory, or bochs under EFI on amd64
	// (virt-handler's default BochsDisplayForEFIGuests), and VNC on a
	// unix socket in the per-VMI folder.
	if enabledOr(d.AutoattachGraphicsDevice, true) {
		if scratch == "" {
			return &SpecError{Field: "spec.domain.devices.autoattachGraphicsDevice", Msg: "a display needs a per-VMI folder for its VNC socket (no scratch folder given); set it to false"}
		}
		dom.Devices.Graphics = []libvirtxml.DomainGraphic{{VNC: &libvirtxml.DomainGraphicVNC{
			Listeners: []libvirtxml.DomainGraphicListener{{Socket: &libvirtxml.DomainGraphicListenerSocket{Socket: filepath.Join(scratch, "virt-vnc")}}},
		}}}
		model := libvirtxml.DomainVideoModel{Type: "vga", Heads: 1, VRam: 16384}
		if vmi.IsBootloaderEFI() {
			model = libvirtxml.DomainVideoModel{Type: "bochs", Heads: 1}
		}
		dom.Devices.Videos = []libvirtxml.DomainVideo{{Model: model}}
	}
	return nil
}

// setTPM renders devices.tpm as KubeVirt v1.6.0's converter does
// (kubevirt.io/kubevirt pkg/virt-launcher/virtwrap/converter, Convert_v1_
// VirtualMachineInstance_To_api_Domain, and pkg/tpm HasDevice): a
// tpm-tis device on libvirt's emulator backend, TPM 2.0, unless enabled
// is false. libvirt starts swtpm for it and stops it with the domain; the
// state is transient. persistent: true is refused: KubeVirt keeps that
// state on the VM's backend-storage PVC, which one launch does not have.
func setTPM(dom *libvirtxml.Domain, t *v1.TPMDevice) error {
	if t == nil || !enabledOr(t.Enabled, true) {
		return nil
	}
	if t.Persistent != nil && *t.Persistent {
		return &SpecError{Field: "spec.domain.devices.tpm.persistent", Msg: "a persistent vTPM keeps its state on KubeVirt's backend-storage PVC, which one launch does not have; leave it unset or false"}
	}
	dom.Devices.TPMs = []libvirtxml.DomainTPM{{
		Model:   "tpm-tis",
		Backend: &libvirtxml.DomainTPMBackend{Emulator: &libvirtxml.DomainTPMBackendEmulator{Version: "2.0"}},
	}}
	return nil
}
