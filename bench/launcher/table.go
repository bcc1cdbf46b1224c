package main

import (
	"fmt"
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
