package cluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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
