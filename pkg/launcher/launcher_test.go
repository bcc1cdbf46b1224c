package launcher

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/faults"
)

func TestDrawTimeout(t *testing.T) {
	base, jitter := 4*time.Minute, 2*time.Minute
	r := Rand(42, "qemu-timeout")
	const n = 10000
	var sum time.Duration
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for i := 0; i < n; i++ {
		d := DrawTimeout(base, jitter, r)
		if d < base || d >= base+jitter {
			t.Fatalf("draw %d = %v, outside [%v, %v)", i, d, base, base+jitter)
		}
		sum += d
		lo, hi = min(lo, d), max(hi, d)
	}
	mean := sum / n
	// The mean of uniform[4m, 6m) is 5m; its standard error over 10000
	// draws is ~0.35 s, so 3 s is a generous and still meaningful bound.
	if mean < 5*time.Minute-3*time.Second || mean > 5*time.Minute+3*time.Second {
		t.Fatalf("mean = %v, want about 5m", mean)
	}
	if lo > base+2*time.Second || hi < base+jitter-2*time.Second {
		t.Fatalf("draws span [%v, %v], want nearly the whole range", lo, hi)
	}
	a := DrawTimeout(base, jitter, Rand(7, "qemu-timeout"))
	b := DrawTimeout(base, jitter, Rand(7, "qemu-timeout"))
	c := DrawTimeout(base, jitter, Rand(8, "qemu-timeout"))
	if a != b {
		t.Fatalf("same seed gave %v and %v", a, b)
	}
	if a == c {
		t.Fatalf("seeds 7 and 8 gave the same draw %v", a)
	}
	if d := DrawTimeout(base, 0, r); d != base {
		t.Fatalf("no jitter: %v, want %v", d, base)
	}
}

func TestValidateTimeout(t *testing.T) {
	if err := ValidateTimeout(0, time.Second); err == nil || !strings.Contains(err.Error(), "--qemu-timeout") {
		t.Fatalf("zero base: %v", err)
	}
	if err := ValidateTimeout(time.Second, -time.Second); err == nil || !strings.Contains(err.Error(), "--qemu-timeout-jitter") {
		t.Fatalf("negative jitter: %v", err)
	}
}

// TestExitCodesAgree keeps the launcher's exit codes, the fault catalog's
// copy of them and the README table in step.
func TestExitCodesAgree(t *testing.T) {
	pairs := map[ExitCode]faults.ExitCode{
		ExitSucceeded: faults.ExitSucceeded, ExitPanic: faults.ExitPanic, ExitQemuStartTimeout: faults.ExitQemuStartTimeout,
		ExitLibvirtError: faults.ExitLibvirtError, ExitQemuFailed: faults.ExitQemuFailed, ExitVMCrashed: faults.ExitVMCrashed,
	}
	for ours, theirs := range pairs {
		if int(ours) != int(theirs) {
			t.Errorf("launcher exit %d, faults catalog says %d", ours, theirs)
		}
	}
	seen := map[ExitCode]bool{}
	for _, c := range ExitCodes() {
		if seen[c.Code] {
			t.Errorf("exit code %d listed twice", c.Code)
		}
		seen[c.Code] = true
	}
	for _, def := range faults.Catalog() {
		for _, o := range def.Outcomes {
			if o.Exit < 0 {
				continue
			}
			if !seen[ExitCode(o.Exit)] {
				t.Errorf("fault %s promises exit %d, which the launcher does not document", def.Name, o.Exit)
			}
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatalf("reading README: %v", err)
	}
	if !strings.Contains(string(readme), ExitCodeMarkdown()) {
		t.Errorf("README.md does not contain the exit code table; paste this:\n%s", ExitCodeMarkdown())
	}
	if !strings.Contains(string(readme), faults.MarkdownTable()) {
		t.Errorf("README.md does not contain the fault table; paste this:\n%s", faults.MarkdownTable())
	}
}

func TestEmitter(t *testing.T) {
	var buf bytes.Buffer
	e := NewEmitter(&buf, FormatJSON, Event{VMI: "v", Namespace: "ns", UID: "u", Attempt: 3})
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	code := 10
	if err := e.Emit(Event{Time: at, Event: EventFailed, Phase: PhaseFailed, Reason: ReasonQemuStartTimeout, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON object: %q", buf.String())
	}
	want := map[string]any{"time": "2026-01-02T02:04:05.123456789Z", "event": "Failed", "vmi": "v", "namespace": "ns", "uid": "u",
		"phase": "Failed", "attempt": 3.0, "reason": "QemuStartTimeout", "exitCode": 10.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	buf.Reset()
	e = NewEmitter(&buf, FormatText, Event{VMI: "v", Namespace: "ns"})
	e.Emit(Event{Time: at, Event: EventRunning, Phase: PhaseRunning, Details: map[string]any{"startSeconds": 0.5}})
	if got := buf.String(); got != "02:04:05.123  Running     ns/v  startSeconds=0.5\n" {
		t.Fatalf("text line = %q", got)
	}
}
