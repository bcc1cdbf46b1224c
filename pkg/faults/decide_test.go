package faults

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func mustParse(t *testing.T, flags ...string) Plan {
	t.Helper()
	p, err := Parse(nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// firing returns the attempts in 1..n on which the fault fires.
func firing(p Plan, seed launcherapi.Seed, key, fault string, n int) []int {
	var out []int
	for a := 1; a <= n; a++ {
		if p.Decide(DecideInput{Seed: seed, Key: key, Attempt: a}).Has(fault) {
			out = append(out, a)
		}
	}
	return out
}

func TestDecideIsDeterministic(t *testing.T) {
	p := mustParse(t, "qemu-kill=30%signal=term", "qemu-hang=50%", "guest-panic=10%3*after=2s")
	for a := 1; a <= 50; a++ {
		in := DecideInput{Seed: 42, Key: "default/vm", Attempt: a}
		first, second := p.Decide(in), p.Decide(in)
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("attempt %d: %v then %v", a, first, second)
		}
	}
}

func TestDecideDependsOnSeedAndKey(t *testing.T) {
	p := mustParse(t, "qemu-hang=30%")
	base := firing(p, 1, "default/vm", "qemu-hang", 200)
	if other := firing(p, 2, "default/vm", "qemu-hang", 200); slices.Equal(base, other) {
		t.Errorf("seeds 1 and 2 fire on the same attempts: %v", base)
	}
	if other := firing(p, 1, "default/other", "qemu-hang", 200); slices.Equal(base, other) {
		t.Errorf("two VMs fire on the same attempts: %v", base)
	}
	// Faults draw independently of each other.
	q := mustParse(t, "qemu-hang=30%", "guest-noready=30%")
	if slices.Equal(firing(q, 1, "default/vm", "qemu-hang", 200), firing(q, 1, "default/vm", "guest-noready", 200)) {
		t.Error("two faults with the same probability fire on the same attempts")
	}
}

func TestProbabilityRate(t *testing.T) {
	p := mustParse(t, "qemu-hang=30%")
	const n = 1000
	for _, seed := range []launcherapi.Seed{1, 7, ^launcherapi.Seed(2)} {
		got := len(firing(p, seed, "ns/vm", "qemu-hang", n))
		if math.Abs(float64(got)/n-0.30) > 0.04 {
			t.Errorf("seed %d: fired on %d of %d attempts, want 30%% ± 4%%", seed, got, n)
		}
	}
	fired := 0
	for seed := launcherapi.Seed(0); seed < n; seed++ {
		if p.Decide(DecideInput{Seed: seed, Key: "ns/vm", Attempt: 1}).Has("qemu-hang") {
			fired++
		}
	}
	if math.Abs(float64(fired)/n-0.30) > 0.04 {
		t.Errorf("fired for %d of %d seeds, want 30%% ± 4%%", fired, n)
	}
	never := mustParse(t, "qemu-hang=0%")
	if got := firing(never, 1, "ns/vm", "qemu-hang", n); len(got) != 0 {
		t.Errorf("0%% fault fired on %v", got)
	}
}

func TestCount(t *testing.T) {
	for _, term := range []string{"qemu-hang=3*", "qemu-hang=30%3*", "qemu-hang=5%7*"} {
		p := mustParse(t, term)
		want := p.specs()[0].Count
		got := firing(p, 9, "ns/vm", "qemu-hang", 1000)
		if len(got) != want {
			t.Errorf("%s: fired %d times (%v), want exactly %d", term, len(got), got, want)
		}
	}
	p := mustParse(t, "qemu-hang=3*")
	if got := firing(p, 9, "ns/vm", "qemu-hang", 1000); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("100%% count 3 fired on %v, want the first three attempts", got)
	}
	// The count is the same whether attempts are decided in order or not.
	q := mustParse(t, "qemu-hang=30%4*")
	in := firing(q, 5, "ns/vm", "qemu-hang", 100)
	var reversed []int
	for a := 100; a >= 1; a-- {
		if q.Decide(DecideInput{Seed: 5, Key: "ns/vm", Attempt: a}).Has("qemu-hang") {
			reversed = append([]int{a}, reversed...)
		}
	}
	if !slices.Equal(in, reversed) {
		t.Errorf("in order %v, in reverse %v", in, reversed)
	}
}

func TestAttempts(t *testing.T) {
	tests := []struct {
		term string
		want []int
	}{
		{"qemu-hang=attempts=2", []int{2}},
		{"qemu-hang=attempts=1-3", []int{1, 2, 3}},
		{"qemu-hang=attempts=8-", []int{8, 9, 10}},
		{"qemu-hang=attempts=1,3,5", []int{1, 3, 5}},
		{"qemu-hang=attempts=2,4-5,9", []int{2, 4, 5, 9}},
		{"qemu-hang=2*attempts=3-", []int{3, 4}},
		{"qemu-hang=2*attempts=1,6-", []int{1, 6}},
	}
	for _, tt := range tests {
		if got := firing(mustParse(t, tt.term), 1, "ns/vm", "qemu-hang", 10); !slices.Equal(got, tt.want) {
			t.Errorf("%s fired on %v, want %v", tt.term, got, tt.want)
		}
	}
	// A probabilistic fault with a count only counts firings inside its range.
	p := mustParse(t, "qemu-hang=30%5*attempts=100-")
	got := firing(p, 3, "ns/vm", "qemu-hang", 1000)
	if len(got) != 5 || got[0] < 100 {
		t.Errorf("30%% 5* attempts=100- fired on %v", got)
	}
}

func TestAttemptBelowOneIsFirst(t *testing.T) {
	p := mustParse(t, "qemu-hang=attempts=1")
	if !p.Decide(DecideInput{Attempt: 0}).Has("qemu-hang") {
		t.Error("attempt 0 should be taken as attempt 1")
	}
}

func TestDelays(t *testing.T) {
	p := mustParse(t,
		"qemu-kill=after=5s,delay=2s",
		"qemu-hang=delay=3s",
		"guest-panic=after=4s,delay=1s",
		"launcher-crash=at=before-start,delay=100ms",
	)
	d := p.Decide(DecideInput{Key: "ns/vm", Attempt: 1})
	if k, _ := Find[QemuKill](d); k.After != 7*time.Second {
		t.Errorf("qemu-kill After = %v, want after+delay = 7s", k.After)
	}
	if x, _ := d.Get("qemu-kill"); x.Delay != 7*time.Second || x.Point != PointAfterStart {
		t.Errorf("qemu-kill decision = %+v", x)
	}
	if h, _ := Find[QemuHang](d); h.Delay != 3*time.Second {
		t.Errorf("qemu-hang Delay = %v", h.Delay)
	}
	if c, _ := Find[LauncherCrash](d); c.At != PointBeforeStart || c.Delay != 100*time.Millisecond {
		t.Errorf("launcher-crash = %+v", c)
	}
	if got := d.At(PointBeforeStart); len(got) != 1 || got[0].Fault != "launcher-crash" {
		t.Errorf("At(before-start) = %v", got)
	}
	if got := d.KernelArgs(); !slices.Equal(got, []string{"harness.panic=5"}) {
		t.Errorf("KernelArgs() = %v, want harness.panic=5", got)
	}
}

func TestEveryFaultHasATypedAction(t *testing.T) {
	for _, def := range Catalog() {
		term := def.Name
		var required []string
		for _, p := range def.Params {
			if p.Required {
				required = append(required, p.Name+"=1s")
			}
		}
		if len(required) > 0 {
			term += "=" + strings.Join(required, ",")
		}
		d := mustParse(t, term).Decide(DecideInput{Key: "ns/vm", Attempt: 1})
		x, ok := d.Get(def.Name)
		if !ok || x.Action == nil || x.Action.FaultName() != def.Name {
			t.Errorf("%s: decision %+v", def.Name, x)
		}
	}
}

func TestSummaries(t *testing.T) {
	p := mustParse(t, "qemu-kill=30%2*signal=term,after=5s,attempts=1-3")
	b, err := json.Marshal(p.Summary())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"fault":"qemu-kill"`, `"term":"qemu-kill=30%2*signal=SIGTERM,after=5s,attempts=1-3"`, `"probability":30`, `"count":2`, `"attempts":"1-3"`, `"signal":"SIGTERM"`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("plan JSON %s lacks %s", b, w)
		}
	}
	d := mustParse(t, "qemu-kill=signal=term,after=5s").Decide(DecideInput{Key: "ns/vm", Attempt: 1})
	b, err = json.Marshal(d.Summary())
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"fault":"qemu-kill","point":"after-start","delay":"5s","params":{"after":"5s","signal":"SIGTERM"}}]`
	if string(b) != want {
		t.Errorf("decisions JSON = %s, want %s", b, want)
	}
	if got := d.String(); got != "qemu-kill(signal=SIGTERM,after=5s,effective-delay=5s)" {
		t.Errorf("String() = %q", got)
	}
	if b, _ := json.Marshal(Decisions(nil).Summary()); string(b) != "[]" {
		t.Errorf("no decisions JSON = %s", b)
	}
}

func TestSocketFaultActsAtTheCommandSocketFromRunning(t *testing.T) {
	d := mustParse(t, "launcher-socket-unresponsive=after=5s,for=1m,delay=1s").Decide(DecideInput{Key: "ns/vm", Attempt: 1})
	x, ok := d.Get("launcher-socket-unresponsive")
	if !ok || x.Point != PointCommandSocket {
		t.Fatalf("decision %+v, want one at %s", x, PointCommandSocket)
	}
	a, _ := Find[LauncherSocketUnresponsive](d)
	if a.After != 6*time.Second || a.For != time.Minute {
		t.Errorf("action %+v, want After 6s (after+delay), For 1m", a)
	}
	if got := d.At(PointCommandSocket); len(got) != 1 {
		t.Errorf("At(command-socket) = %v", got)
	}
	if _, err := Parse(nil, []string{"launcher-socket-unresponsive=after=5s"}); !errors.Is(err, ErrMissingParam) {
		t.Errorf("without for: %v, want ErrMissingParam", err)
	}
}
