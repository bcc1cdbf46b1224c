package converter

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// HostVirt is what the accelerator choice reads about the host.
type HostVirt struct {
	// CPUFlags are the flags of the first processor in /proc/cpuinfo.
	CPUFlags []string
	// Modules are the names of loaded kernel modules (from /sys/module).
	Modules []string
	// KVMDevice tells whether /dev/kvm exists.
	KVMDevice bool
}

// hardwareKVMModules are the kernel modules that back /dev/kvm with real
// hardware virtualization. kvm_pvm (a software nested-paging host) is not
// among them: an ordinary guest hangs under it.
var hardwareKVMModules = []string{"kvm_intel", "kvm_amd"}

// ChooseAccel resolves mode against the host. For auto it returns KVM only
// when the CPU advertises vmx or svm, a hardware KVM module is loaded and
// /dev/kvm exists; otherwise TCG. The reason explains the choice in one line.
func ChooseAccel(mode Accel, host HostVirt) (accel Accel, reason string) {
	switch mode {
	case AccelKVM:
		return AccelKVM, "forced by --accel=kvm"
	case AccelTCG:
		return AccelTCG, "forced by --accel=tcg"
	}
	flag := ""
	for _, f := range host.CPUFlags {
		if f == "vmx" || f == "svm" {
			flag = f
			break
		}
	}
	module := ""
	for _, m := range host.Modules {
		for _, hw := range hardwareKVMModules {
			if m == hw {
				module = m
			}
		}
	}
	switch {
	case flag == "":
		return AccelTCG, "TCG: the CPU advertises no hardware virtualization (no vmx/svm flag in /proc/cpuinfo)" + otherKVM(host.Modules)
	case module == "":
		return AccelTCG, fmt.Sprintf("TCG: the CPU has %s but no hardware KVM module (kvm_intel/kvm_amd) is loaded%s", flag, otherKVM(host.Modules))
	case !host.KVMDevice:
		return AccelTCG, fmt.Sprintf("TCG: %s is loaded but /dev/kvm does not exist", module)
	}
	return AccelKVM, fmt.Sprintf("KVM: the CPU has %s and %s is loaded", flag, module)
}

func otherKVM(modules []string) string {
	var others []string
	for _, m := range modules {
		if strings.HasPrefix(m, "kvm_") {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return ""
	}
	return fmt.Sprintf("; loaded %s cannot run an ordinary guest", strings.Join(others, ", "))
}

// ReadHostVirt reads CPU flags, loaded modules and /dev/kvm from the host.
func ReadHostVirt() (HostVirt, error) {
	var h HostVirt
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return h, fmt.Errorf("reading CPU flags: %w", err)
	}
	h.CPUFlags = parseCPUFlags(cpuinfo)
	entries, err := os.ReadDir("/sys/module")
	if err != nil {
		return h, fmt.Errorf("listing loaded modules: %w", err)
	}
	for _, e := range entries {
		// Built-in code also shows up in /sys/module; a loaded module (or
		// built-in KVM) has parameters or a refcount, which is enough here.
		if strings.HasPrefix(e.Name(), "kvm") {
			h.Modules = append(h.Modules, e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join("/dev", "kvm")); err == nil {
		h.KVMDevice = true
	}
	return h, nil
}

func parseCPUFlags(cpuinfo []byte) []string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "flags" {
			return strings.Fields(value)
		}
	}
	return nil
}
