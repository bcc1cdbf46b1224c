package faults

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

func ann(name, value string) map[string]string {
	return map[string]string{AnnotationPrefix + name: value}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		flags       []string
		fault       string
		prob        float64
		count       int
		delay       time.Duration
		attempts    string
		params      map[string]string
		canonical   string
	}{
		{
			name:        "annotation with everything",
			annotations: ann("qemu-kill", "30%2*signal=SIGTERM,after=5s,attempts=1-3"),
			fault:       "qemu-kill", prob: 30, count: 2, attempts: "1-3",
			params:    map[string]string{"signal": "SIGTERM", "after": "5s"},
			canonical: "qemu-kill=30%2*signal=SIGTERM,after=5s,attempts=1-3",
		},
		{
			name:        "empty annotation value is always, unlimited",
			annotations: ann("qemu-hang", ""),
			fault:       "qemu-hang", prob: 100, attempts: "all",
			params: map[string]string{}, canonical: "qemu-hang",
		},
		{
			name:  "flag with probability and short lower-case signal",
			flags: []string{"qemu-kill=50%signal=kill"},
			fault: "qemu-kill", prob: 50, attempts: "all",
			params:    map[string]string{"signal": "SIGKILL", "after": "0s"},
			canonical: "qemu-kill=50%",
		},
		{
			name:  "flag with count only",
			flags: []string{"qemu-hang=2*"},
			fault: "qemu-hang", prob: 100, count: 2, attempts: "all",
			params: map[string]string{}, canonical: "qemu-hang=2*",
		},
		{
			name:  "bare flag",
			flags: []string{"guest-noready"},
			fault: "guest-noready", prob: 100, attempts: "all",
			params: map[string]string{}, canonical: "guest-noready",
		},
		{
			name:  "mixed-case signal with prefix",
			flags: []string{"qemu-kill=signal=SigSegv"},
			fault: "qemu-kill", prob: 100, attempts: "all",
			params:    map[string]string{"signal": "SIGSEGV", "after": "0s"},
			canonical: "qemu-kill=signal=SIGSEGV",
		},
		{
			name:        "whitespace and fractional probability",
			annotations: ann("qemu-kill", " 12.5% 3* signal = hup , after = 1m "),
			fault:       "qemu-kill", prob: 12.5, count: 3, attempts: "all",
			params:    map[string]string{"signal": "SIGHUP", "after": "1m0s"},
			canonical: "qemu-kill=12.5%3*signal=SIGHUP,after=1m0s",
		},
		{
			name:        "attempts list with commas, then delay",
			annotations: ann("guest-panic", "after=3s,attempts=1,3,5,delay=2s"),
			fault:       "guest-panic", prob: 100, delay: 2 * time.Second, attempts: "1,3,5",
			params:    map[string]string{"after": "3s"},
			canonical: "guest-panic=after=3s,delay=2s,attempts=1,3,5",
		},
		{
			name:  "open attempts range",
			flags: []string{"qemu-hang=attempts=4-"},
			fault: "qemu-hang", prob: 100, attempts: "4-",
			params: map[string]string{}, canonical: "qemu-hang=attempts=4-",
		},
		{
			name:  "overlapping attempts ranges are merged",
			flags: []string{"qemu-hang=attempts=3-5,1-3,9"},
			fault: "qemu-hang", prob: 100, attempts: "1-5,9",
			params: map[string]string{}, canonical: "qemu-hang=attempts=1-5,9",
		},
		{
			name:  "attempts 1- is all",
			flags: []string{"qemu-hang=attempts=1-"},
			fault: "qemu-hang", prob: 100, attempts: "all",
			params: map[string]string{}, canonical: "qemu-hang",
		},
		{
			name:        "disk fault with errno by name",
			annotations: ann("disk-io-error", "disk=rootdisk,op=WRITE,errno=enospc"),
			fault:       "disk-io-error", prob: 100, attempts: "all",
			params:    map[string]string{"disk": "rootdisk", "op": "write", "errno": "28"},
			canonical: "disk-io-error=disk=rootdisk,op=write,errno=28",
		},
		{
			name:  "disk fault defaults",
			flags: []string{"disk-io-error"},
			fault: "disk-io-error", prob: 100, attempts: "all",
			params:    map[string]string{"disk": "", "op": "read", "errno": "5"},
			canonical: "disk-io-error",
		},
		{
			name:  "launcher crash point",
			flags: []string{"launcher-crash=at=after-running,delay=250ms"},
			fault: "launcher-crash", prob: 100, delay: 250 * time.Millisecond, attempts: "all",
			params:    map[string]string{"at": "after-running"},
			canonical: "launcher-crash=at=after-running,delay=250ms",
		},
		{
			name:  "libvirt error default call",
			flags: []string{"libvirt-error=0%"},
			fault: "libvirt-error", prob: 0, attempts: "all",
			params: map[string]string{"at": "start"}, canonical: "libvirt-error=0%",
		},
		{
			name:  "slow start required after",
			flags: []string{"qemu-slow-start=after=90s"},
			fault: "qemu-slow-start", prob: 100, attempts: "all",
			params: map[string]string{"after": "1m30s"}, canonical: "qemu-slow-start=after=1m30s",
		},
		{
			name:  "explicit defaults are left out of the canonical form",
			flags: []string{"qemu-kill=100%signal=SIGKILL,after=0s,delay=0s,attempts=all"},
			fault: "qemu-kill", prob: 100, attempts: "all",
			params:    map[string]string{"signal": "SIGKILL", "after": "0s"},
			canonical: "qemu-kill",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Parse(tt.annotations, tt.flags)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			specs := plan.specs()
			if len(specs) != 1 {
				t.Fatalf("got %d specs, want 1", len(specs))
			}
			s := specs[0]
			if s.Fault != tt.fault || s.Probability != tt.prob || s.Count != tt.count || s.Delay != tt.delay || s.Attempts.String() != tt.attempts {
				t.Errorf("got fault=%s prob=%v count=%d delay=%v attempts=%s, want %s %v %d %v %s",
					s.Fault, s.Probability, s.Count, s.Delay, s.Attempts, tt.fault, tt.prob, tt.count, tt.delay, tt.attempts)
			}
			got := s.Params()
			if len(got) != len(tt.params) {
				t.Errorf("params = %v, want %v", got, tt.params)
			}
			for k, v := range tt.params {
				if got[k] != v {
					t.Errorf("param %s = %q, want %q", k, got[k], v)
				}
			}
			if s.String() != tt.canonical {
				t.Errorf("String() = %q, want %q", s.String(), tt.canonical)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		flags       []string
		kind        error
		want        []string // substrings of the message
	}{
		{"unknown fault in annotation", ann("qemu-kil", ""), nil, ErrUnknownFault,
			[]string{`annotation "faults.crashloop.dev/qemu-kil"`, `"qemu-kil"`, `did you mean "qemu-kill"`, "allowed: launcher-crash, libvirt-error, qemu-hang"}},
		{"unknown fault in flag", nil, []string{"nope=2*"}, ErrUnknownFault,
			[]string{`--fault "nope=2*"`, `"nope"`, "disk-io-error"}},
		{"empty key under the prefix", ann("", ""), nil, ErrUnknownFault,
			[]string{`annotation "faults.crashloop.dev/"`, "allowed: launcher-crash"}},
		{"unknown parameter", nil, []string{"qemu-kill=sgnal=KILL"}, ErrUnknownParam,
			[]string{`--fault "qemu-kill=sgnal=KILL"`, `"sgnal=KILL"`, `did you mean "signal"`, "allowed: signal, after, delay, attempts"}},
		{"missing required parameter", nil, []string{"qemu-slow-start=2*"}, ErrMissingParam,
			[]string{`--fault "qemu-slow-start=2*"`, `"after"`, "after=<duration>"}},
		{"duplicate parameter", ann("qemu-kill", "signal=KILL,signal=TERM"), nil, ErrDuplicateParam,
			[]string{`annotation "faults.crashloop.dev/qemu-kill"`, `"signal=TERM"`}},
		{"probability above 100", nil, []string{"qemu-hang=150%"}, ErrBadValue,
			[]string{`"150%"`, "0 to 100"}},
		{"negative probability", nil, []string{"qemu-hang=-5%"}, ErrBadValue,
			[]string{`"-5%"`, "0 to 100"}},
		{"probability not a number", nil, []string{"qemu-hang=1e2%"}, ErrBadValue,
			[]string{`"1e2%"`, "not a number"}},
		{"count zero", nil, []string{"qemu-hang=0*"}, ErrBadValue,
			[]string{`"0*"`, "at least 1"}},
		{"negative count", nil, []string{"qemu-hang=-1*"}, ErrBadValue,
			[]string{`"-1*"`, "at least 1"}},
		{"count before probability", nil, []string{"qemu-hang=2*30%"}, ErrBadValue,
			[]string{`"2*30%"`, "must come before the count"}},
		{"bad duration", nil, []string{"qemu-kill=after=5x"}, ErrBadValue,
			[]string{`"after=5x"`, "want a duration like"}},
		{"negative duration", nil, []string{"qemu-kill=after=-1s"}, ErrBadValue,
			[]string{`"after=-1s"`, "negative"}},
		{"huge duration", nil, []string{"qemu-kill=delay=25h"}, ErrBadValue,
			[]string{`"delay=25h"`, "at most 24h"}},
		{"bad signal", nil, []string{"qemu-kill=signal=SIGFOO"}, ErrBadValue,
			[]string{`"signal=SIGFOO"`, "allowed: SIGKILL, SIGTERM, SIGSEGV, SIGABRT, SIGINT, SIGQUIT, SIGHUP, SIGBUS"}},
		{"bad errno", nil, []string{"disk-io-error=errno=99"}, ErrBadValue,
			[]string{`"errno=99"`, "allowed: 5 (EIO), 22 (EINVAL), 28 (ENOSPC)"}},
		{"bad enum", nil, []string{"launcher-crash=at=never"}, ErrBadValue,
			[]string{`"at=never"`, "allowed: before-libvirt, before-define, before-start, after-running"}},
		{"bad disk name", nil, []string{"disk-io-error=disk=Root_Disk"}, ErrBadValue,
			[]string{`"disk=Root_Disk"`, "disk name"}},
		{"attempts range backwards", nil, []string{"qemu-hang=attempts=3-1"}, ErrBadValue,
			[]string{`"attempts=3-1"`, "ends before it starts", "N-M"}},
		{"attempt zero", nil, []string{"qemu-hang=attempts=0"}, ErrBadValue,
			[]string{`"attempts=0"`, "out of range"}},
		{"attempts without start", nil, []string{"qemu-hang=attempts=-3"}, ErrBadValue,
			[]string{`"attempts=-3"`, "missing attempt number"}},
		{"attempts not a number", nil, []string{"qemu-hang=attempts=first"}, ErrBadValue,
			[]string{`"attempts=first"`, "not an attempt number"}},
		{"sub-second guest panic", nil, []string{"guest-panic=after=1500ms"}, ErrBadValue,
			[]string{`"after=1500ms"`, "whole seconds"}},
		{"sub-second guest poweroff delay", ann("guest-poweroff", "delay=500ms"), nil, ErrBadValue,
			[]string{`"delay=500ms"`, "whole seconds"}},
		{"item without value", nil, []string{"qemu-kill=signal"}, ErrSyntax,
			[]string{`"signal"`, "not param=value", "[P%][N*][param=value,...]"}},
		{"empty item", nil, []string{"qemu-kill=signal=KILL,,after=1s"}, ErrSyntax,
			[]string{"empty parameter"}},
		{"probability after params", nil, []string{"qemu-kill=signal=KILL,30%"}, ErrSyntax,
			[]string{`"30%"`, "P% must come first"}},
		{"fault in annotation and flag", ann("qemu-hang", ""), []string{"qemu-hang=2*"}, ErrDuplicateFault,
			[]string{`--fault "qemu-hang=2*"`, `also given by annotation "faults.crashloop.dev/qemu-hang"`}},
		{"fault in two flags", nil, []string{"qemu-hang", "qemu-hang=2*"}, ErrDuplicateFault,
			[]string{`--fault "qemu-hang=2*"`, `also given by --fault "qemu-hang"`}},
		{"fault twice, first one bad", nil, []string{"qemu-hang=0*", "qemu-hang"}, ErrDuplicateFault,
			[]string{`--fault "qemu-hang"`, `also given by --fault "qemu-hang=0*"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Parse(tt.annotations, tt.flags)
			if err == nil {
				t.Fatalf("Parse accepted it: %v", plan)
			}
			if !plan.Empty() {
				t.Errorf("plan not empty on error: %v", plan)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error %q is not %v", err, tt.kind)
			}
			var fe *Error
			if !errors.As(err, &fe) {
				t.Errorf("error %q is not a *faults.Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse(map[string]string{
		AnnotationPrefix + "qemu-kil":  "",
		AnnotationPrefix + "qemu-hang": "0*",
	}, []string{"guest-panic=after=0.5s"})
	for _, w := range []string{"qemu-kil", `"0*"`, `"after=0.5s"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not mention %s", err, w)
		}
	}
}

func TestParseIgnoresOtherAnnotations(t *testing.T) {
	plan, err := Parse(map[string]string{
		"kubevirt.io/qemu-kill":     "junk",
		"faults.crashloop.dev":      "junk",
		"x.faults.crashloop.dev/qa": "junk",
		FailFastAnnotation:          "",
	}, nil)
	if err != nil || !plan.Empty() {
		t.Fatalf("Parse = %v, %v; want an empty plan", plan, err)
	}
	if plan.String() != "" {
		t.Errorf("empty plan String() = %q", plan.String())
	}
}

func TestPlanOrderAndRoundTrip(t *testing.T) {
	plan, err := Parse(ann("guest-panic", "after=2s"), []string{"qemu-kill=signal=term", "launcher-crash=50%"})
	if err != nil {
		t.Fatal(err)
	}
	want := "launcher-crash=50% qemu-kill=signal=SIGTERM guest-panic=after=2s"
	if plan.String() != want {
		t.Errorf("String() = %q, want %q", plan.String(), want)
	}
	fromFlags, err := Parse(nil, plan.Flags())
	if err != nil || fromFlags.String() != want {
		t.Errorf("Parse(Flags()) = %q, %v", fromFlags, err)
	}
	fromAnn, err := Parse(plan.Annotations(), nil)
	if err != nil || fromAnn.String() != want {
		t.Errorf("Parse(Annotations()) = %q, %v", fromAnn, err)
	}
}

func TestSpecTypedValues(t *testing.T) {
	plan, err := Parse(nil, []string{"qemu-kill=signal=quit,after=3s,delay=1s", "disk-io-error=errno=EINVAL"})
	if err != nil {
		t.Fatal(err)
	}
	d := plan.Decide(DecideInput{Key: "ns/vm", Attempt: 1})
	k, ok := Find[QemuKill](d)
	if !ok || k.Signal != syscall.SIGQUIT || k.After != 4*time.Second {
		t.Errorf("Find[QemuKill] = %+v, %v; want SIGQUIT after 4s (after+delay)", k, ok)
	}
	io, ok := Find[DiskIOError](d)
	if !ok || io.Errno != syscall.EINVAL || io.Op != DiskOpRead || io.Disk != "" {
		t.Errorf("Find[DiskIOError] = %+v, %v", io, ok)
	}
}

func TestValidateDisks(t *testing.T) {
	named, _ := Parse(nil, []string{"disk-io-error=disk=data"})
	first, _ := Parse(nil, []string{"disk-io-error"})
	none, _ := Parse(nil, []string{"qemu-hang"})
	if err := named.ValidateDisks([]string{"root", "data"}); err != nil {
		t.Errorf("named disk present: %v", err)
	}
	err := named.ValidateDisks([]string{"root"})
	if !errors.Is(err, ErrUnknownDisk) || !strings.Contains(err.Error(), `"disk=data"`) || !strings.Contains(err.Error(), "allowed: root") {
		t.Errorf("named disk missing: %v", err)
	}
	if err := first.ValidateDisks([]string{"root"}); err != nil {
		t.Errorf("first disk: %v", err)
	}
	if err := first.ValidateDisks(nil); !errors.Is(err, ErrUnknownDisk) {
		t.Errorf("first disk of none: %v", err)
	}
	if err := none.ValidateDisks(nil); err != nil {
		t.Errorf("no disk fault: %v", err)
	}
}

func TestWantsSimulatedCrash(t *testing.T) {
	if !WantsSimulatedCrash(map[string]string{FailFastAnnotation: ""}) {
		t.Error("presence with empty value must be enough")
	}
	if !WantsSimulatedCrash(map[string]string{FailFastAnnotation: "false"}) {
		t.Error("any value counts, as in KubeVirt")
	}
	if WantsSimulatedCrash(map[string]string{"other": ""}) || WantsSimulatedCrash(nil) {
		t.Error("absent annotation must not crash")
	}
}

func TestLongAttemptsList(t *testing.T) {
	var b strings.Builder
	b.WriteString("attempts=")
	for i := 50000; i >= 1; i-- {
		fmt.Fprintf(&b, "%d,", i)
	}
	b.WriteString("delay=1s")
	plan, err := Parse(ann("qemu-hang", b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.specs()[0].Attempts.String(); got != "1-50000" {
		t.Errorf("attempts = %s, want 1-50000", got)
	}
}
