package main

import (
	"strings"
	"testing"
)

func TestOptionsNameWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		o    options
		args int
		want string
	}{
		{options{start: true, workDir: "/w", timeout: 1}, 1, "takes flags only"},
		{options{timeout: 1}, 0, "want either --start"},
		{options{start: true, sidecars: 2, workDir: "/w", timeout: 1}, 0, "want either --start"},
		{options{start: true, timeout: 1}, 0, "--start needs --work-dir"},
		{options{sidecars: 1}, 0, "--timeout 0s: want a positive duration"},
	} {
		if err := tc.o.validate(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.o, err, tc.want)
		}
	}
	for _, o := range []options{{start: true, workDir: "/w", timeout: 1}, {sidecars: 3, timeout: 1}, {check: true, timeout: 1}} {
		if err := o.validate(0); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestLauncherOwnSurvivesTheHooks: what KubeVirt's domain type cannot
// carry is put back into the hooks' domain, and what the hooks changed
// stays.
func TestLauncherOwnSurvivesTheHooks(t *testing.T) {
	const ours = `<domain type="qemu"><name>d</name><on_poweroff>destroy</on_poweroff><devices><panic model="isa"><address type="isa" iobase="0x505"/></panic></devices></domain>`
	spec, own, err := kubevirtDomain(ours)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "d" || len(own.lost) != 2 {
		t.Fatalf("spec %q, lost %v: want on_poweroff and the panic address", spec.Name, own.lost)
	}
	// A hook that renamed the domain and kept the panic device.
	out, err := own.restore(`<domain type="qemu"><name>renamed</name><devices><panic model="isa"></panic></devices></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<name>renamed</name>", "<on_poweroff>destroy</on_poweroff>", `<address iobase="0x505" type="isa">`} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: no %s", out, want)
		}
	}
	if _, _, err := kubevirtDomain("<domain"); err == nil {
		t.Error("unreadable XML accepted")
	}
}
