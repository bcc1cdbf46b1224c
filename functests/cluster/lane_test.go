package cluster

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/controller"
)

func TestRemoveTemplateAnnotationPatch(t *testing.T) {
	p, err := RemoveTemplateAnnotationPatch("kubevirt.io/func-test-virt-launcher-fail-fast")
	if err != nil {
		t.Fatal(err)
	}
	var ops []map[string]any
	if err := json.Unmarshal(p, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0]["op"] != "remove" || ops[0]["path"] != "/spec/template/metadata/annotations/kubevirt.io~1func-test-virt-launcher-fail-fast" {
		t.Fatalf("patch = %s", p)
	}
	if p, _ := RemoveTemplateAnnotationPatch("a~b"); !strings.Contains(string(p), "a~0b") {
		t.Fatalf("~ not escaped: %s", p)
	}
	if _, err := RemoveTemplateAnnotationPatch(""); err == nil {
		t.Fatal("empty key accepted")
	}
}

func TestGapsAndEnvelope(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	attempts := []Attempt{
		{UID: "3", Created: at(30), Finished: at(31)},
		{UID: "1", Created: at(0), Finished: at(1)},
		{UID: "2", Created: at(13), Finished: at(14)},
		{UID: "4", Created: at(130)},
	}
	gaps := Gaps(attempts, 1)
	if len(gaps) != 3 {
		t.Fatalf("gaps = %+v", gaps)
	}
	want := []struct {
		count    int
		observed time.Duration
	}{{1, 12 * time.Second}, {2, 16 * time.Second}, {3, 99 * time.Second}}
	for i, w := range want {
		if gaps[i].Count != w.count || gaps[i].Observed != w.observed {
			t.Fatalf("gap %d = %+v, want count %d observed %v", i, gaps[i], w.count, w.observed)
		}
	}
	err := CheckEnvelope(gaps, time.Second)
	if err == nil || !strings.Contains(err.Error(), "failure 2: waited 16s, envelope 40s..1m0s") || strings.Contains(err.Error(), "failure 1") {
		t.Fatalf("CheckEnvelope = %v, want only failure 2 flagged", err)
	}
	// A Running attempt resets the count.
	attempts = []Attempt{{Created: at(0), Finished: at(1)}, {Created: at(12), Running: true, Finished: at(20)}, {Created: at(21), Finished: at(22)}, {Created: at(34)}}
	gaps = Gaps(attempts, 1)
	if len(gaps) != 2 || gaps[1].Count != 1 {
		t.Fatalf("after Running the count restarts at 1: %+v", gaps)
	}
	if err := CheckEnvelope(gaps, time.Second); err != nil {
		t.Fatal(err)
	}
	// Scaled.
	if g := Gaps([]Attempt{{Created: at(0), Finished: at(1)}, {Created: at(2)}}, 0.1); g[0].Low != time.Second || g[0].High != 1500*time.Millisecond {
		t.Fatalf("scaled bounds = %v..%v", g[0].Low, g[0].High)
	}
}

func TestCompareLoops(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	trace := func(steps ...any) Trace {
		var tr Trace
		for i := 0; i < len(steps); i += 2 {
			tr = tr.Add(Sample{At: t0.Add(time.Duration(i) * time.Second), Status: steps[i].(string), Count: steps[i+1].(int)})
		}
		return tr
	}
	loop := trace("Starting", 0, "CrashLoopBackOff", 1, "Starting", 1, "CrashLoopBackOff", 2, "CrashLoopBackOff", 2, "Starting", 2, "CrashLoopBackOff", 3)
	if got := loop.Counts(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("counts %v", got)
	}
	if len(loop) != 6 {
		t.Fatalf("repeated sample kept: %d samples", len(loop))
	}
	missedStarting := trace("CrashLoopBackOff", 1, "CrashLoopBackOff", 2, "CrashLoopBackOff", 3, "Stopped", 0)
	if err := CompareLoops(loop, missedStarting, "kubevirt", "ours", 3); err != nil {
		t.Fatalf("a missed transient Starting is not a difference: %v", err)
	}
	skipped := trace("CrashLoopBackOff", 1, "CrashLoopBackOff", 3)
	err := CompareLoops(loop, skipped, "kubevirt", "ours", 3)
	if err == nil || !strings.Contains(err.Error(), "kubevirt [1 2 3], ours [1 3]") || !strings.Contains(err.Error(), "ours never showed CrashLoopBackOff at count 2") {
		t.Fatalf("skipped count not reported: %v", err)
	}
	noLoopStatus := trace("Starting", 1, "Starting", 2, "Starting", 3)
	noLoopStatus = append(Trace{{Count: 0, Status: "Starting"}}, noLoopStatus...)
	if err := CompareLoops(loop, noLoopStatus, "kubevirt", "ours", 3); err == nil || !strings.Contains(err.Error(), "ours never showed CrashLoopBackOff at count 1 (statuses [Starting])") {
		t.Fatalf("missing CrashLoopBackOff not reported: %v", err)
	}
}

func TestControllerAttemptsAndTrace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	events := []controller.Event{
		{Time: at(0), Event: controller.EventStarted, VMIUID: "a", PrintableStatus: "Starting"},
		{Time: at(1), Event: controller.EventExited, VMIUID: "a", Phase: "Failed", PrintableStatus: "Starting"},
		{Time: at(1), Event: controller.EventBackoffPlanned, FailCount: 1, PrintableStatus: "CrashLoopBackOff"},
		{Time: at(12), Event: controller.EventStarted, VMIUID: "b", FailCount: 1, PrintableStatus: "Starting"},
		{Time: at(13), Event: "Phase", VMIUID: "b", Phase: "Running", FailCount: 1, PrintableStatus: "Running"},
		{Time: at(13), Event: controller.EventRecordCleared, PrintableStatus: "Running"},
	}
	as := ControllerAttempts(events)
	if len(as) != 2 || !as[0].Finished.Equal(at(1)) || as[0].Running || !as[1].Running || !as[1].Created.Equal(at(12)) {
		t.Fatalf("attempts %+v", as)
	}
	tr := ControllerTrace(events)
	if got := tr.Counts(); !slices.Equal(got, []int{0, 1, 0}) {
		t.Fatalf("counts %v (trace %+v)", got, tr)
	}
	if tr.Last().Status != "Running" {
		t.Fatalf("last %+v", tr.Last())
	}
}
