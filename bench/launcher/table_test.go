package main

import (
	"strings"
	"testing"
	"time"
)

// TestMedianCI checks the order statistics of the median's 95% interval
// against the binomial tables: n=20 gives x(6)..x(15), n=10 x(2)..x(9),
// n=6 x(1)..x(6), and n=5 has none.
func TestMedianCI(t *testing.T) {
	for _, c := range []struct {
		n, lo, hi int
		ok        bool
	}{{20, 5, 14, true}, {10, 1, 8, true}, {6, 0, 5, true}, {5, 0, 0, false}, {1, 0, 0, false}} {
		lo, hi, ok := medianCI(c.n)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("medianCI(%d) = %d, %d, %v; want %d, %d, %v", c.n, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// TestPairedRatio checks that the row pairs a[i] with b[i] (not medians of
// each side) and judges the median against the target.
func TestPairedRatio(t *testing.T) {
	ms := func(v ...int) sample {
		var s sample
		for _, x := range v {
			s = append(s, time.Duration(x)*time.Millisecond)
		}
		return s
	}
	tb := &table{judge: true}
	// Each a[i] is 0.9 of b[i], while the medians of a and b alone are
	// 450 and 300 (ratio 1.5): only pairing gives 0.90.
	tb.pairedRatio("r", "<= 1.0x", ms(90, 180, 270, 450, 900, 1800), ms(100, 200, 300, 500, 1000, 2000))
	got := tb.rows[0].text
	if !strings.HasPrefix(got, "0.90x paired (n 6") || !strings.Contains(got, "(met; also at the CI's upper end)") {
		t.Errorf("paired ratio row = %q", got)
	}
	tb = &table{judge: true}
	tb.pairedRatio("r", "<= 1.0x", ms(110, 90, 120), ms(100, 100, 100))
	if got := tb.rows[0].text; got != "1.10x paired (n 3, range 0.90–1.20) (not met)" {
		t.Errorf("paired ratio row = %q", got)
	}
}
