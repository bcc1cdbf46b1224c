package converter

import (
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/kvmprobe"
)

// TestChooseAccel checks that forced modes win and that auto follows
// kvmprobe.Decide (whose own test covers the rule's cases).
func TestChooseAccel(t *testing.T) {
	tests := []struct {
		name       string
		mode       Accel
		host       kvmprobe.Host
		want       Accel
		wantReason string
	}{
		{"pvm-only host like these CI machines", AccelAuto,
			kvmprobe.Host{CPUFlags: []string{"fpu", "hypervisor"}, Modules: []string{"kvm", "kvm_pvm"}, KVMDevice: true},
			AccelTCG, "kvm_pvm cannot run an ordinary guest"},
		{"intel node", AccelAuto,
			kvmprobe.Host{CPUFlags: []string{"fpu", "vmx"}, Modules: []string{"kvm", "kvm_intel"}, KVMDevice: true},
			AccelKVM, "vmx and kvm_intel"},
		{"forced kvm on pvm host", AccelKVM,
			kvmprobe.Host{Modules: []string{"kvm_pvm"}}, AccelKVM, "forced"},
		{"forced tcg on kvm node", AccelTCG,
			kvmprobe.Host{CPUFlags: []string{"vmx"}, Modules: []string{"kvm_intel"}, KVMDevice: true}, AccelTCG, "forced"},
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
