package converter

import (
	"fmt"

	"github.com/crashloop-harness/crashloop/pkg/kvmprobe"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Accel is the accelerator a domain runs under; its values are --accel's
// (launcherapi.AccelKVM, AccelTCG, AccelAuto).
type Accel string

const (
	// AccelKVM runs the guest with hardware virtualization (libvirt domain type "kvm").
	AccelKVM Accel = launcherapi.AccelKVM
	// AccelTCG runs the guest under QEMU's software emulator (libvirt domain type "qemu").
	AccelTCG Accel = launcherapi.AccelTCG
	// AccelAuto picks KVM when the host really offers it and TCG otherwise.
	AccelAuto Accel = launcherapi.AccelAuto
)

// DomainType is the libvirt <domain type=...> value for the accelerator.
func (a Accel) DomainType() string {
	if a == AccelKVM {
		return "kvm"
	}
	return "qemu"
}

// ParseAccel validates a user-supplied accelerator mode.
func ParseAccel(s string) (Accel, error) {
	switch Accel(s) {
	case AccelAuto, AccelKVM, AccelTCG:
		return Accel(s), nil
	}
	return "", fmt.Errorf("unknown accelerator %q: allowed values are auto, kvm, tcg", s)
}

// ChooseAccel resolves mode against the host. For auto it asks
// kvmprobe.Decide: KVM only when the CPU advertises vmx or svm, a hardware
// KVM module is loaded and /dev/kvm exists; otherwise TCG. The reason
// explains the choice in one line.
func ChooseAccel(mode Accel, host kvmprobe.Host) (accel Accel, reason string) {
	switch mode {
	case AccelKVM:
		return AccelKVM, "forced by --accel=kvm"
	case AccelTCG:
		return AccelTCG, "forced by --accel=tcg"
	}
	kvm, why := kvmprobe.Decide(host)
	if !kvm {
		return AccelTCG, why
	}
	return AccelKVM, why
}
