package main

import (
	"bufio"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format: a metric name, its
// labels and its value.
type sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// parseMetrics reads the samples of the named metrics from a Prometheus
// text exposition (comments and other metrics are skipped).
func parseMetrics(text string, names ...string) ([]sample, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		name := l
		if i := strings.IndexAny(l, "{ "); i >= 0 {
			name = l[:i]
		}
		if !want[name] {
			continue
		}
		s, err := parseSample(l, name)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseSample parses `name{k="v",...} value [timestamp]`.
func parseSample(l, name string) (sample, error) {
	s := sample{Name: name, Labels: map[string]string{}}
	rest := l[len(name):]
	if strings.HasPrefix(rest, "{") {
		end := strings.LastIndexByte(rest, '}')
		if end < 0 {
			return s, fmt.Errorf("%q: labels not closed", l)
		}
		for _, kv := range splitLabels(rest[1:end]) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return s, fmt.Errorf("%q: label %q has no '='", l, kv)
			}
			uq, err := strconv.Unquote(v)
			if err != nil {
				return s, fmt.Errorf("%q: label %s value %s: %w", l, k, v, err)
			}
			s.Labels[strings.TrimSpace(k)] = uq
		}
		rest = rest[end+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, fmt.Errorf("%q: no value", l)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("%q: value: %w", l, err)
	}
	s.Value = v
	return s, nil
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, escaped, start := false, false, 0
	for i, r := range s {
		switch {
		case escaped:
			escaped = false
		case r == '\\':
			escaped = true
		case r == '"':
			inQuote = !inQuote
		case r == ',' && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}

// requestCounts sums apiserver_request_total by "VERB resource[/subresource]".
func requestCounts(samples []sample) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if s.Name != "apiserver_request_total" {
			continue
		}
		res := s.Labels["resource"]
		if sub := s.Labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[s.Labels["verb"]+" "+res] += s.Value
	}
	return out
}

// rate is one "VERB resource" and its requests per second.
type rate struct {
	Key    string
	PerSec float64
}

// requestRates is (after - before) / seconds per key, largest first, keys
// with no request in between left out.
func requestRates(before, after map[string]float64, seconds float64) []rate {
	var out []rate
	for k, a := range after {
		if d := a - before[k]; d > 0 {
			out = append(out, rate{Key: k, PerSec: d / seconds})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PerSec != out[j].PerSec {
			return out[i].PerSec > out[j].PerSec
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// isWrite reports whether an API verb changes state.
func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION":
		return true
	}
	return false
}

// totals sums rates into all requests and writes per second.
func totals(rs []rate) (all, writes float64) {
	for _, r := range rs {
		all += r.PerSec
		verb, _, _ := strings.Cut(r.Key, " ")
		if isWrite(verb) {
			writes += r.PerSec
		}
	}
	return all, writes
}

// gauge is the value of the first sample named name, if any.
func gauge(samples []sample, name string) (float64, bool) {
	for _, s := range samples {
		if s.Name == name {
			return s.Value, true
		}
	}
	return 0, false
}
