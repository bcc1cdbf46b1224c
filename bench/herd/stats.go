package main

import (
	"math"
	"sort"
	"time"
)

// retry is one retry of a failed VM: when it was planned for
// (status.startFailure.retryAfterTimestamp) and when the next VMI was
// created.
type retry struct {
	VM      string
	Count   int
	Planned time.Time
	Actual  time.Time
}

// quantiles of a set of durations.
type quantiles struct {
	N             int
	P50, P99, Max time.Duration
}

// quantilesOf sorts ds and reads p50, p99 and the maximum (nearest rank).
func quantilesOf(ds []time.Duration) quantiles {
	if len(ds) == 0 {
		return quantiles{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration {
		return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
	}
	return quantiles{N: len(s), P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

// lateness is each retry's actual minus planned time.
func lateness(rs []retry) []time.Duration {
	out := make([]time.Duration, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Actual.Sub(r.Planned))
	}
	return out
}

// spread says how evenly retries fall in time: the count per window of
// Window from Start to End, and the coefficient of variation of those
// counts (0: perfectly even; a herd that retries together scores high).
type spread struct {
	Window time.Duration
	Counts []int
	CV     float64
	Peak   int
}

// spreadOf buckets the times in [start, end) into windows of w.
func spreadOf(times []time.Time, start, end time.Time, w time.Duration) spread {
	n := int(end.Sub(start) / w)
	if n <= 0 {
		return spread{Window: w}
	}
	sp := spread{Window: w, Counts: make([]int, n)}
	for _, t := range times {
		i := int(t.Sub(start) / w)
		if t.Before(start) || i >= n {
			continue
		}
		sp.Counts[i]++
	}
	var sum, sq float64
	for _, c := range sp.Counts {
		sum += float64(c)
		sp.Peak = max(sp.Peak, c)
	}
	mean := sum / float64(n)
	for _, c := range sp.Counts {
		sq += (float64(c) - mean) * (float64(c) - mean)
	}
	if mean > 0 {
		sp.CV = math.Sqrt(sq/float64(n)) / mean
	}
	return sp
}

// retryTimes are the actual times of rs.
func retryTimes(rs []retry) []time.Time {
	out := make([]time.Time, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Actual)
	}
	return out
}
