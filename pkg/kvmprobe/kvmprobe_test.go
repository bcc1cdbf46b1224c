package kvmprobe

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name       string
		host       Host
		want       bool
		wantReason string
	}{
		{"pvm-only host like these CI machines",
			Host{CPUFlags: []string{"fpu", "hypervisor"}, Modules: []string{"kvm", "kvm_pvm"}, KVMDevice: true},
			false, "kvm_pvm cannot run an ordinary guest"},
		{"intel node",
			Host{CPUFlags: []string{"fpu", "vmx"}, Modules: []string{"kvm", "kvm_intel"}, KVMDevice: true},
			true, "vmx and kvm_intel"},
		{"amd node",
			Host{CPUFlags: []string{"svm"}, Modules: []string{"kvm", "kvm_amd"}, KVMDevice: true},
			true, "svm and kvm_amd"},
		{"flag but no module",
			Host{CPUFlags: []string{"vmx"}, Modules: []string{"kvm"}, KVMDevice: true},
			false, "no hardware KVM module"},
		{"module but no flag",
			Host{CPUFlags: []string{"sse"}, Modules: []string{"kvm_intel"}, KVMDevice: true},
			false, "no vmx/svm"},
		{"no device",
			Host{CPUFlags: []string{"vmx"}, Modules: []string{"kvm_intel"}},
			false, "/dev/kvm does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Decide(tt.host)
			if got != tt.want {
				t.Fatalf("Decide = %v (%s), want %v", got, reason, tt.want)
			}
			if !strings.Contains(reason, tt.wantReason) {
				t.Fatalf("reason %q does not mention %q", reason, tt.wantReason)
			}
			if prefix := map[bool]string{true: "KVM: ", false: "TCG: "}[got]; !strings.HasPrefix(reason, prefix) {
				t.Fatalf("reason %q does not start with %q", reason, prefix)
			}
		})
	}
}

func TestParseCPUFlags(t *testing.T) {
	in := "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme vmx sse\nbugs\t: x\nprocessor\t: 1\nflags\t: fpu\n"
	got := parseCPUFlags([]byte(in))
	if strings.Join(got, " ") != "fpu vme vmx sse" {
		t.Fatalf("flags = %v", got)
	}
}
