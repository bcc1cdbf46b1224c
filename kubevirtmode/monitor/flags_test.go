package monitor

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// computeLine is the compute container of a launcher pod as one
// release's virt-controller renders it (pkg/virt-controller/services/
// template.go): the container's command and args. The process's argv is
// their concatenation, as kubelet (and our node agent's podman) runs them.
type computeLine struct {
	release       string
	command, args []string
}

// argv is what virt-launcher-monitor's ParseFlags gets: the command
// without the program, then the args.
func (c computeLine) argv() []string {
	return append(append([]string{}, c.command[1:]...), c.args...)
}

// typicalVMIFlags are the flags every release renders first for a typical
// VMI: jittered timeout 240 s + [0,120) s, the default 30 s termination
// grace period + 15 s padding, no hook sidecar, amd64's default OVMF
// folder, the default 2000 MiB disk-verification limit.
func typicalVMIFlags() []string {
	return []string{
		"--qemu-timeout", "297s",
		"--name", "testvmi-x7k2p",
		"--uid", "5d1c0b0e-8f3a-4c52-9e7d-2a6f0c1b9e44",
		"--namespace", "kubevirt-test-default1",
		"--kubevirt-share-dir", "/var/run/kubevirt",
		"--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
		"--container-disk-dir", "/var/run/kubevirt/container-disks",
		"--grace-period-seconds", "45",
		"--hook-sidecars", "0",
		"--ovmf-path", "/usr/share/edk2/ovmf",
		"--disk-memory-limit", "2097152000",
	}
}

const monitorPath = "/usr/bin/virt-launcher-monitor"

// with is flags followed by more.
func with(flags []string, more ...string) []string {
	return append(append([]string{}, flags...), more...)
}

// renderedComputeLines are, per release, a typical VMI's compute command
// line (non-root, no feature gate) and one with every optional flag that
// release can render (every feature gate it reads on, the libvirt log
// filters annotation, the keep-after-failure and fail-fast annotations).
func renderedComputeLines() []computeLine {
	base := typicalVMIFlags()
	v18 := with(base, "--hypervisor", "kvm")
	return []computeLine{
		// v1.7.x: the v1.6.0 flags, all in the command.
		{"v1.7.4 typical", with([]string{monitorPath}, with(base, "--run-as-nonroot")...), nil},
		{"v1.7.4 every flag", with([]string{monitorPath}, with(base, "--run-as-nonroot", "--image-volume",
			"--libvirt-log-filters", "3:remote 4:event 3:util.json 1:qemu",
			"--allow-emulation", "--keep-after-failure", "--simulate-crash")...), nil},
		// v1.8.x: --hypervisor always, two feature-gated flags.
		{"v1.8.4 typical", with([]string{monitorPath}, with(v18, "--run-as-nonroot")...), nil},
		{"v1.8.4 every flag", with([]string{monitorPath}, with(v18, "--run-as-nonroot", "--image-volume",
			"--libvirt-hook-server-and-client", "--upgrade-ordinal-ifaces",
			"--libvirt-log-filters", "3:remote 4:event",
			"--allow-emulation", "--keep-after-failure", "--simulate-crash")...), nil},
		// v1.9.0: four more feature-gated flags.
		{"v1.9.0 typical", with([]string{monitorPath}, with(v18, "--run-as-nonroot")...), nil},
		{"v1.9.0 every flag", with([]string{monitorPath}, with(v18, "--run-as-nonroot", "--image-volume",
			"--libvirt-hook-server-and-client", "--upgrade-ordinal-ifaces", "--vgpu-dedicated-hook",
			"--vm-stats-collector", "--firmware-auto-selection",
			"--libvirt-log-filters", "3:remote 4:event",
			"--allow-emulation", "--allow-cross-arch-emulation", "--keep-after-failure", "--simulate-crash")...), nil},
		// main (kubevirt/kubevirt#18237): the flags are the container's
		// args; --allow-cross-arch-emulation is still appended to the
		// command, so it comes right after the program.
		{"main typical", []string{monitorPath}, with(v18, "--run-as-nonroot")},
		{"main every flag", []string{monitorPath, "--allow-cross-arch-emulation"}, with(v18, "--run-as-nonroot", "--image-volume",
			"--upgrade-ordinal-ifaces", "--vgpu-dedicated-hook", "--vm-stats-collector", "--firmware-auto-selection",
			"--libvirt-log-filters", "3:remote 4:event",
			"--allow-emulation", "--keep-after-failure", "--simulate-crash")},
	}
}

func TestParseFlagsAcceptsEveryReleasesComputeLine(t *testing.T) {
	for _, c := range renderedComputeLines() {
		f, err := ParseFlags(c.argv(), io.Discard)
		if err != nil {
			t.Errorf("%s: %v", c.release, err)
			continue
		}
		// Without --hypervisor (v1.7) as with it: KVM.
		if f.Hypervisor != HypervisorKVM || f.Name != "testvmi-x7k2p" || f.GracePeriodSeconds != 45 || !f.RunAsNonRoot {
			t.Errorf("%s: parsed %+v", c.release, f)
		}
		for _, x := range f.ignoredFeatures() {
			if x.set != slices.Contains(c.argv(), x.flag) {
				t.Errorf("%s: %s parsed as %v", c.release, x.flag, x.set)
			}
		}
		if every := strings.HasSuffix(c.release, "every flag"); f.AllowEmulation != every || f.SimulateCrash != every || f.KeepAfterFailure != every {
			t.Errorf("%s: --allow-emulation %v, --simulate-crash %v, --keep-after-failure %v", c.release, f.AllowEmulation, f.SimulateCrash, f.KeepAfterFailure)
		}
	}
}

func TestParseFlagsTakesAnEmptyHypervisorForKVM(t *testing.T) {
	// A KubeVirt CR with hypervisors: [{}] renders --hypervisor "".
	f, err := ParseFlags(with(typicalVMIFlags(), "--hypervisor", ""), io.Discard)
	if err != nil || f.Hypervisor != HypervisorKVM {
		t.Fatalf("--hypervisor \"\": %q, %v; want kvm", f.Hypervisor, err)
	}
}

func TestIgnoredFeatureFlagsAreSaidOnceEach(t *testing.T) {
	for _, c := range renderedComputeLines() {
		f, err := ParseFlags(c.argv(), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.release, err)
		}
		var buf bytes.Buffer
		f.logIgnoredFeatures(slog.New(slog.NewTextHandler(&buf, nil)))
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if buf.Len() == 0 {
			lines = nil
		}
		var want []string
		for _, x := range f.ignoredFeatures() {
			if slices.Contains(c.argv(), x.flag) {
				want = append(want, x.flag)
			}
		}
		if len(lines) != len(want) {
			t.Errorf("%s: %d log lines for the flags %v:\n%s", c.release, len(lines), want, buf.String())
			continue
		}
		for i, flag := range want {
			if !strings.Contains(lines[i], "flag accepted: feature not implemented by this launcher, ignored") || !strings.Contains(lines[i], "flag="+flag+" ") {
				t.Errorf("%s: line %d %q does not say %s is ignored", c.release, i, lines[i], flag)
			}
		}
	}
}

func TestParseFlagsRefusesAnotherHypervisorNamingIt(t *testing.T) {
	for _, c := range renderedComputeLines() {
		for _, hv := range []string{"xen", "hyperv-direct"} {
			argv := with(c.argv(), "--hypervisor", hv)
			_, err := ParseFlags(argv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), `--hypervisor "`+hv+`"`) || !strings.Contains(err.Error(), "allowed: kvm") {
				t.Errorf("%s + --hypervisor %s: got %v, want an error naming %q and the allowed kvm", c.release, hv, err, hv)
			}
		}
	}
}

func TestParseFlagsStillRefusesAnUnknownFlag(t *testing.T) {
	for _, c := range renderedComputeLines() {
		_, err := ParseFlags(with(c.argv(), "--vm-stats-collector-interval", "5s"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "unknown flag: --vm-stats-collector-interval") {
			t.Errorf("%s + an unknown flag: got %v, want it refused by name", c.release, err)
		}
	}
}
