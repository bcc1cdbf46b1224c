package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// sample is one row's measurements.
type sample []time.Duration

func (s sample) sorted() sample { c := slices.Clone(s); slices.Sort(c); return c }
func (s sample) median() time.Duration {
	c := s.sorted()
	if len(c) == 0 {
		return 0
	}
	return c[len(c)/2]
}

// row is one line of the table: measurements, or a computed text.
type row struct {
	name, target string
	values       sample
	text         string
}

// table is the benchmark's rows; with judge, a ratio whose target is
// "<= Nx" says whether it is met.
type table struct {
	rows  []row
	judge bool
}

// add adds a row of measurements; a row not measured (-only) is left out.
func (t *table) add(name, target string, v sample) {
	if len(v) == 0 {
		return
	}
	t.rows = append(t.rows, row{name: name, target: target, values: v})
}
func (t *table) note(name, target, text string) {
	t.rows = append(t.rows, row{name: name, target: target, text: text})
}

// ratio adds a row a/b of two medians.
func (t *table) ratio(name, target string, a, b sample) {
	if len(a) == 0 || len(b) == 0 || b.median() == 0 {
		return
	}
	x := float64(a.median()) / float64(b.median())
	text := fmt.Sprintf("%.2fx", x)
	var limit float64
	if _, err := fmt.Sscanf(target, "<= %gx", &limit); err == nil && t.judge {
		text += map[bool]string{true: " (met)", false: " (not met)"}[x <= limit]
	}
	t.note(name, target, text)
}

// pairedRatio adds a row of the ratios a[i]/b[i] of measurements taken
// side by side (a and b in turn, the same load on both): their median,
// with the distribution-free 95% confidence interval of that median and
// the range. The target is judged on the median; the interval says how
// sure that is.
func (t *table) pairedRatio(name, target string, a, b sample) {
	if len(a) == 0 || len(a) != len(b) {
		return
	}
	var ratios []float64
	for i := range a {
		if b[i] > 0 {
			ratios = append(ratios, float64(a[i])/float64(b[i]))
		}
	}
	if len(ratios) == 0 {
		return
	}
	slices.Sort(ratios)
	n := len(ratios)
	med := ratios[n/2]
	if n%2 == 0 {
		med = (ratios[n/2-1] + ratios[n/2]) / 2
	}
	text := fmt.Sprintf("%.2fx paired (n %d, range %.2f–%.2f", med, n, ratios[0], ratios[n-1])
	lo, hi, ok := medianCI(n)
	if ok {
		text += fmt.Sprintf(", 95%% CI of the median %.2f–%.2f", ratios[lo], ratios[hi])
	}
	text += ")"
	var limit float64
	if _, err := fmt.Sscanf(target, "<= %gx", &limit); err == nil && t.judge {
		verdict := map[bool]string{true: " (met", false: " (not met"}[med <= limit]
		if ok {
			verdict += map[bool]string{true: "; also at the CI's upper end", false: "; not at the CI's upper end"}[ratios[hi] <= limit]
		}
		text += verdict + ")"
	}
	t.note(name, target, text)
}

// medianCI is the distribution-free 95% confidence interval of the median
// of n sorted values, as 0-based indexes lo and hi: the widest inner pair
// of order statistics with P(Binomial(n, 1/2) <= lo) <= 2.5%. ok is
// false when n is too small for one (n < 6).
func medianCI(n int) (lo, hi int, ok bool) {
	// cum is P(X <= k) for X ~ Binomial(n, 1/2).
	p := math.Pow(0.5, float64(n))
	cum, term := 0.0, p
	k := -1
	for j := 0; j <= n; j++ {
		if cum+term > 0.025 {
			break
		}
		cum += term
		k = j
		term = term * float64(n-j) / float64(j+1)
	}
	// k is the largest with P(X <= k) <= 2.5%: the interval is
	// [x(k+1), x(n-k)] in 1-based order statistics.
	if k < 0 {
		return 0, 0, false
	}
	return k, n - 1 - k, true
}

func (t *table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| measurement | target | median | min | max | n |\n|---|---|---|---|---|---|\n")
	for _, r := range t.rows {
		if r.values == nil {
			fmt.Fprintf(&b, "| %s | %s | %s | | | |\n", r.name, r.target, r.text)
			continue
		}
		s := r.values.sorted()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d |\n", r.name, r.target, round(s.median()), round(s[0]), round(s[len(s)-1]), len(s))
	}
	return b.String()
}

func round(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}
