package backoff

import (
	"math/rand/v2"
	"testing"
	"time"
)

// kubeVirtBounds are the bounds in seconds per failure count of the
// upstream curve table (curveRows in rules_test.go).
func kubeVirtBounds() map[int][2]int {
	m := map[int][2]int{}
	for _, r := range curveRows() {
		m[r.count] = [2]int{r.lo, r.hi}
	}
	return m
}

func TestKubeVirtDelayStaysInBoundsAndUsesWholeRange(t *testing.T) {
	const draws = 1000
	for _, seed := range []uint64{1, 42, 20240601} {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for count := 0; count <= 7; count++ {
			lo, hi := kubeVirtBounds()[count][0], kubeVirtBounds()[count][1]
			seen := map[int]int{}
			for range draws {
				d := KubeVirt{}.Delay(count, r)
				if d%time.Second != 0 {
					t.Fatalf("seed %d count %d: delay %s is not whole seconds", seed, count, d)
				}
				s := int(d / time.Second)
				if s < lo || s > hi {
					t.Fatalf("seed %d count %d: delay %ds outside [%d, %d]", seed, count, s, lo, hi)
				}
				seen[s]++
			}
			gotLo, gotHi := hi, lo
			for s := range seen {
				gotLo, gotHi = min(gotLo, s), max(gotHi, s)
			}
			if gotLo != lo || gotHi != hi {
				t.Errorf("seed %d count %d: draws span [%d, %d], want the whole [%d, %d]", seed, count, gotLo, gotHi, lo, hi)
			}
			// Every whole second of the range should turn up; allow a few
			// misses where a value's chance per draw is below 1%.
			width := hi - lo + 1
			if missing := width - len(seen); missing > width/20 {
				t.Errorf("seed %d count %d: %d of %d values in range never drawn", seed, count, missing, width)
			}
		}
	}
}

func TestKubeVirtJitterIsUniform(t *testing.T) {
	// Count 3: 90 + uniform[0,45]; each of 46 values has p=1/46. With
	// 46000 draws every bucket should hold 1000 +- 15% (about 5 sigma).
	r := rand.New(rand.NewPCG(7, 7))
	buckets := map[int]int{}
	for range 46000 {
		buckets[int(KubeVirt{}.Delay(3, r)/time.Second)]++
	}
	for s := 90; s <= 135; s++ {
		if n := buckets[s]; n < 850 || n > 1150 {
			t.Errorf("delay %ds drawn %d times of 46000, want about 1000", s, n)
		}
	}
}

func TestKubeVirtLargeCountsAndMaxDelay(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, count := range []int{8, 100, 1 << 20, int(^uint(0) >> 1)} {
		if d := (KubeVirt{}).Delay(count, r); d != 300*time.Second {
			t.Errorf("Delay(%d) = %s, want 300s", count, d)
		}
	}
	// A larger cap raises the interval: max 900 s -> interval 30 s.
	k := KubeVirt{MaxDelay: 900 * time.Second}
	for range 1000 {
		d := k.Delay(1, r)
		if d < 30*time.Second || d > 45*time.Second {
			t.Fatalf("max 900s, count 1: delay %s outside [30s, 45s]", d)
		}
	}
}

func TestOtherCurves(t *testing.T) {
	kubelet, _ := Preset("kubelet")
	reduced, _ := Preset("kubelet-reduced")
	systemd, _ := Preset("systemd")
	s := time.Second
	cases := []struct {
		name  string
		curve Curve
		want  []time.Duration // counts 1..len
	}{
		{"kubelet", kubelet.Curve, []time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 300 * s, 300 * s}},
		{"kubelet-reduced", reduced.Curve, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s}},
		{"systemd", systemd.Curve, nil},
	}
	for _, c := range cases {
		for i, want := range c.want {
			if got := c.curve.Delay(i+1, nil); got != want {
				t.Errorf("%s: Delay(%d) = %s, want %s", c.name, i+1, got, want)
			}
		}
	}
	// systemd steps: 1 s at the first failure, 300 s from the sixth on,
	// strictly growing in between.
	prev := time.Duration(0)
	for n := 1; n <= 6; n++ {
		d := systemd.Curve.Delay(n, nil)
		if d <= prev {
			t.Errorf("systemd: Delay(%d) = %s not above Delay(%d) = %s", n, d, n-1, prev)
		}
		prev = d
	}
	if d := systemd.Curve.Delay(1, nil); d != s {
		t.Errorf("systemd: Delay(1) = %s, want 1s", d)
	}
	if d := systemd.Curve.Delay(9, nil); d != 300*s {
		t.Errorf("systemd: Delay(9) = %s, want 300s", d)
	}
	if _, err := Preset("nope"); err == nil {
		t.Error("Preset(\"nope\") returned no error")
	}
}

func TestScaled(t *testing.T) {
	cases := []struct {
		scale float64
		in    time.Duration
		want  time.Duration
	}{
		{0, 10 * time.Second, 10 * time.Second},
		{1, 10 * time.Second, 10 * time.Second},
		{0.01, 10 * time.Second, 100 * time.Millisecond},
		{0.001, 300 * time.Second, 300 * time.Millisecond},
		{2, time.Second, 2 * time.Second},
	}
	for _, c := range cases {
		if got := (Policy{Scale: c.scale}).Scaled(c.in); got != c.want {
			t.Errorf("Scale %g: Scaled(%s) = %s, want %s", c.scale, c.in, got, c.want)
		}
	}
}
