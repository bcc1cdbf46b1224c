package launcherapi

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestArgsRoundTrip(t *testing.T) {
	grace := 7 * time.Second
	in := Args{
		Manifest: "/x/vmi.json", Accel: AccelTCG, LibvirtURI: "qemu:///system", RuntimeDir: "/r", CacheDir: "/c",
		ImageDir: "/i", ContainerDiskDir: "/cd", ConsoleLog: "/x/console.log", PodNetwork: PodNetworkKubeVirtTap, ReadyMarker: "READY", StartTimeout: FixedStartTimeout(283 * time.Second),
		GracePeriod: &grace, Seed: 1<<63 + 5, Attempt: 4, EventFormat: FormatText, LogLevel: "debug",
		SimulateCrash: true, DryRun: true, Faults: []string{"qemu-hang", "qemu-kill=50%2*after=1s"}, ClaimDir: "/claims",
		Instancetypes: t.TempDir(), HookSidecars: 2, FeatureGates: []string{GateHostDisk, GateSidecar},
	}
	argv := in.Build()
	if got := strings.Join(argv, " "); !strings.Contains(got, "--instancetypes "+in.Instancetypes) {
		t.Errorf("Build renders --instancetypes: %s", got)
	}
	if got := strings.Join(argv, " "); !strings.Contains(got, "--feature-gates HostDisk,Sidecar") {
		t.Errorf("Build renders --feature-gates as KubeVirt lists gates: %s", got)
	}
	if got := strings.Join(argv, " "); !strings.Contains(got, "--qemu-timeout 283s --qemu-timeout-jitter 0s") {
		t.Errorf("Build renders the timeout as whole seconds with no jitter: %s", got)
	}
	out, err := ParseArgs(argv, DefaultArgs(), io.Discard)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", argv, err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("Parse(Build(a)) != a (-want +got):\n%s", diff)
	}
}

func TestArgsZeroMeansDefault(t *testing.T) {
	argv := Args{Manifest: "vmi.yaml"}.Build()
	if diff := cmp.Diff([]string{"vmi.yaml"}, argv); diff != "" {
		t.Fatalf("a zero Args renders only the manifest (-want +got):\n%s", diff)
	}
	got, err := ParseArgs(argv, DefaultArgs(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultArgs()
	want.Manifest = "vmi.yaml"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestParseArgsErrors(t *testing.T) {
	file := t.TempDir() + "/objects.yaml"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{}, "missing the VMI manifest"},
		{[]string{"a", "b"}, "want one VMI manifest, got 2"},
		{[]string{"--accel", "hvf", "v"}, `--accel: unknown accelerator "hvf": allowed values are auto, kvm, tcg`},
		{[]string{"--qemu-timeout", "0s", "v"}, "--qemu-timeout must be positive"},
		{[]string{"--qemu-timeout-jitter", "-1s", "v"}, "--qemu-timeout-jitter must not be negative"},
		{[]string{"--grace-period", "-1s", "v"}, "--grace-period must not be negative"},
		{[]string{"--attempt", "0", "v"}, "--attempt must be 1 or more"},
		{[]string{"--event-format", "xml", "v"}, `--event-format: unknown format "xml"`},
		{[]string{"--log-level", "loud", "v"}, `--log-level: unknown level "loud"`},
		{[]string{"--seed", "x", "v"}, `seed "x": want a decimal integer`},
		{[]string{"--no-such-flag", "v"}, "unknown flag: --no-such-flag"},
		{[]string{"--instancetypes", "/no/such/folder", "v"}, "--instancetypes /no/such/folder: want a folder of YAML or JSON files"},
		{[]string{"--instancetypes", file, "v"}, "--instancetypes " + file + ": want a folder"},
		{[]string{"--feature-gates", "HostDisk,Root", "v"}, `--feature-gates: unknown feature gate "Root": allowed values are HostDisk, Sidecar`},
	} {
		_, err := ParseArgs(tc.argv, DefaultArgs(), io.Discard)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) = %v, want a UsageError containing %q", tc.argv, err, tc.want)
		}
	}
	if _, err := ParseArgs([]string{"--help"}, DefaultArgs(), io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("--help: %v, want pflag.ErrHelp", err)
	}
}

func TestSeedAcceptsOldSignedSeeds(t *testing.T) {
	var s Seed
	if err := s.Set("-1"); err != nil || s != Seed(^uint64(0)) {
		t.Errorf("Set(-1) = %d, %v", s, err)
	}
	a, b := Seed(42).Rand("qemu-timeout").Uint64(), Seed(42).Rand("qemu-timeout").Uint64()
	c := Seed(42).Rand("faults").Uint64()
	if a != b || a == c {
		t.Errorf("streams: same seed and stream must agree (%d, %d), other streams differ (%d)", a, b, c)
	}
	if PickSeed() == 0 {
		t.Error("PickSeed returned 0, which means pick one")
	}
}

func TestStartTimeoutDraw(t *testing.T) {
	r := Seed(1).Rand("t")
	seen := map[time.Duration]bool{}
	for range 5000 {
		d := DefaultStartTimeout.Draw(r)
		if d < 240*time.Second || d >= 360*time.Second || d%time.Second != 0 {
			t.Fatalf("KubeVirt's timeout is a whole number of seconds in [240s, 360s), drew %v", d)
		}
		seen[d] = true
	}
	if len(seen) != 120 {
		t.Errorf("drew %d distinct values, want all 120 whole seconds", len(seen))
	}
	short := StartTimeout{Base: time.Second, Jitter: 500 * time.Millisecond}
	for range 100 {
		if d := short.Draw(r); d < time.Second || d >= 1500*time.Millisecond {
			t.Fatalf("sub-second jitter drew %v", d)
		}
	}
	if d := FixedStartTimeout(3 * time.Second).Draw(r); d != 3*time.Second {
		t.Errorf("a fixed timeout draws itself, got %v", d)
	}
	if got := FormatDuration(1500 * time.Millisecond); got != "1.5s" {
		t.Errorf("FormatDuration(1.5s) = %s", got)
	}
}

func TestEventLine(t *testing.T) {
	code := 12
	ev := Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)), Event: EventFailed, VMI: "v",
		Namespace: "ns", UID: "u", Phase: PhaseFailed, Attempt: 2, Reason: ReasonQemuFailed, ExitCode: &code}
	line, err := ev.MarshalLine()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(line), "}\n") || !strings.Contains(string(line), `"time":"2026-01-02T02:04:05.000000006Z"`) {
		t.Errorf("line: %s", line)
	}
	back, err := ParseEvent(line)
	if err != nil || !back.Final() || *back.ExitCode != 12 || back.Reason != ReasonQemuFailed {
		t.Errorf("ParseEvent: %+v, %v", back, err)
	}
	if !strings.Contains(string(line), `"version":1`) {
		t.Errorf("line carries no version 1: %s", line)
	}
	if strings.Contains(string(line), `"stopped"`) {
		t.Errorf("a final event that is not a stop carries stop details: %s", line)
	}
	stop := Event{Event: EventSucceeded, Phase: PhaseSucceeded, Reason: ReasonStopped, Stopped: &StoppedDetails{How: StopDestroyed}}
	line, err = stop.MarshalLine()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseEvent(line); err != nil || back.Stopped == nil || back.Stopped.How != StopDestroyed {
		t.Errorf("stop details do not survive the line %s: %+v, %v", line, back.Stopped, err)
	}
	for _, bad := range []string{"not json", `{"version":1,"phase":"Running"}`, `{"event":"Running"}`, `{"version":2,"event":"Running"}`} {
		if _, err := ParseEvent([]byte(bad)); err == nil {
			t.Errorf("ParseEvent(%q) accepted", bad)
		}
	}
}

func TestExitCodeTableMatchesREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), ExitCodeMarkdown()) {
		t.Errorf("README's exit code table differs from ExitCodes(); it should read:\n%s", ExitCodeMarkdown())
	}
	seen := map[ExitCode]bool{}
	for _, c := range ExitCodes() {
		if seen[c.Code] {
			t.Errorf("exit code %d has two rows", c.Code)
		}
		seen[c.Code] = true
	}
}

func TestLayout(t *testing.T) {
	d := Dir("/s/vm/1")
	got := []string{d.Manifest(), d.Events(), d.Log(), d.Console()}
	want := []string{"/s/vm/1/vmi.json", "/s/vm/1/events.jsonl", "/s/vm/1/launcher.log", "/s/vm/1/console.log"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}
