package converter

import (
	"strings"
	"testing"
)

func TestChooseAccel(t *testing.T) {
	tests := []struct {
		name       string
		mode       Accel
		host       HostVirt
		want       Accel
		wantReason string
	}{
		{"pvm-only host like these CI machines", AccelAuto,
			HostVirt{CPUFlags: []string{"fpu", "hypervisor"}, Modules: []string{"kvm", "kvm_pvm"}, KVMDevice: true},
			AccelTCG, "kvm_pvm cannot run an ordinary guest"},
		{"intel node", AccelAuto,
			HostVirt{CPUFlags: []string{"fpu", "vmx"}, Modules: []string{"kvm", "kvm_intel"}, KVMDevice: true},
			AccelKVM, "vmx and kvm_intel"},
		{"amd node", AccelAuto,
			HostVirt{CPUFlags: []string{"svm"}, Modules: []string{"kvm", "kvm_amd"}, KVMDevice: true},
			AccelKVM, "svm and kvm_amd"},
		{"flag but no module", AccelAuto,
			HostVirt{CPUFlags: []string{"vmx"}, Modules: []string{"kvm"}, KVMDevice: true},
			AccelTCG, "no hardware KVM module"},
		{"module but no flag", AccelAuto,
			HostVirt{CPUFlags: []string{"sse"}, Modules: []string{"kvm_intel"}, KVMDevice: true},
			AccelTCG, "no vmx/svm"},
		{"no device", AccelAuto,
			HostVirt{CPUFlags: []string{"vmx"}, Modules: []string{"kvm_intel"}},
			AccelTCG, "/dev/kvm does not exist"},
		{"forced kvm on pvm host", AccelKVM,
			HostVirt{Modules: []string{"kvm_pvm"}}, AccelKVM, "forced"},
		{"forced tcg on kvm node", AccelTCG,
			HostVirt{CPUFlags: []string{"vmx"}, Modules: []string{"kvm_intel"}, KVMDevice: true}, AccelTCG, "forced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := ChooseAccel(tt.mode, tt.host)
			if got != tt.want {
				t.Fatalf("ChooseAccel = %s (%s), want %s", got, reason, tt.want)
			}
			if !strings.Contains(reason, tt.wantReason) {
				t.Fatalf("reason %q does not mention %q", reason, tt.wantReason)
			}
		})
	}
}

func TestParseAccel(t *testing.T) {
	for _, ok := range []string{"auto", "kvm", "tcg"} {
		if _, err := ParseAccel(ok); err != nil {
			t.Errorf("ParseAccel(%q): %v", ok, err)
		}
	}
	_, err := ParseAccel("hvf")
	if err == nil || !strings.Contains(err.Error(), `"hvf"`) || !strings.Contains(err.Error(), "auto, kvm, tcg") {
		t.Fatalf("ParseAccel(hvf) error = %v, want it to name the value and the allowed ones", err)
	}
}

func TestParseCPUFlags(t *testing.T) {
	in := "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme vmx sse\nbugs\t: x\nprocessor\t: 1\nflags\t: fpu\n"
	got := parseCPUFlags([]byte(in))
	if strings.Join(got, " ") != "fpu vme vmx sse" {
		t.Fatalf("flags = %v", got)
	}
}
