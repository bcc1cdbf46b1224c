// Package kvmprobe holds the one rule for whether this host runs ordinary
// guests under KVM: the CPU advertises hardware virtualization (vmx or
// svm), a hardware KVM module (kvm_intel or kvm_amd) is loaded, and
// /dev/kvm exists; otherwise guests run under TCG. The launcher's
// accelerator choice, cluster-lite's /dev/kvm for launcher containers and
// the functional suites all ask it. A cgo-free leaf: standard library only.
package kvmprobe

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Host is what the KVM decision reads about the host.
type Host struct {
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

// Decide tells whether ordinary guests can run under KVM on host: only
// when the CPU advertises vmx or svm, a hardware KVM module is loaded and
// /dev/kvm exists. The reason explains the choice in one line, starting
// with "KVM:" or "TCG:".
func Decide(host Host) (kvm bool, reason string) {
	flag := virtFlag(host.CPUFlags)
	module := hardwareModule(host.Modules)
	switch {
	case flag == "":
		return false, "TCG: the CPU advertises no hardware virtualization (no vmx/svm flag in /proc/cpuinfo)" + otherKVM(host.Modules)
	case module == "":
		return false, fmt.Sprintf("TCG: the CPU has %s but no hardware KVM module (kvm_intel/kvm_amd) is loaded%s", flag, otherKVM(host.Modules))
	case !host.KVMDevice:
		return false, fmt.Sprintf("TCG: %s is loaded but /dev/kvm does not exist", module)
	}
	return true, fmt.Sprintf("KVM: the CPU has %s and %s is loaded", flag, module)
}

// virtFlag returns the first hardware virtualization flag (vmx or svm)
// among flags, or "".
func virtFlag(flags []string) string {
	for _, f := range flags {
		if f == "vmx" || f == "svm" {
			return f
		}
	}
	return ""
}

// hardwareModule returns the last loaded hardware KVM module among
// modules, or "".
func hardwareModule(modules []string) string {
	module := ""
	for _, m := range modules {
		for _, hw := range hardwareKVMModules {
			if m == hw {
				module = m
			}
		}
	}
	return module
}

// otherKVM names the loaded KVM modules that are not enough for an
// ordinary guest (such as kvm_pvm), as a suffix for the reason.
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

// Read reads CPU flags, loaded modules and /dev/kvm from the host.
func Read() (Host, error) {
	var h Host
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

// Probe reads the host and decides; a host it cannot read runs under TCG,
// and the error says what could not be read.
func Probe() (kvm bool, reason string, err error) {
	h, err := Read()
	kvm, reason = Decide(h)
	return kvm, reason, err
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
