package faults

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxAttempt is the largest attempt number an attempts range may name.
const MaxAttempt = 1_000_000

// AttemptSet is the set of launch attempts (1-based) a fault applies to. The
// zero value is every attempt. Sets are kept normalised (sorted, merged), so
// two sets with the same members have the same String form and are
// reflect.DeepEqual.
type AttemptSet struct {
	ranges []attemptRange // nil: every attempt
}

// attemptRange is lo..hi inclusive; hi == 0 means open-ended.
type attemptRange struct{ lo, hi int }

// ParseAttempts parses an attempts value: "all", or a comma-separated list of
// items N, N-M or N- (N to the last attempt), e.g. "1-3", "2", "4-", "1,3,5".
func ParseAttempts(s string) (AttemptSet, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		return AttemptSet{}, nil
	}
	var rs []attemptRange
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		r, err := parseAttemptRange(item)
		if err != nil {
			return AttemptSet{}, fmt.Errorf("attempts item %q: %w (want N, N-M or N-, with 1 <= N <= M <= %d)", item, err, MaxAttempt)
		}
		rs = append(rs, r)
	}
	return normalise(rs), nil
}

func parseAttemptRange(item string) (attemptRange, error) {
	loS, hiS, isRange := strings.Cut(item, "-")
	lo, err := attemptNumber(loS)
	if err != nil {
		return attemptRange{}, err
	}
	if !isRange {
		return attemptRange{lo, lo}, nil
	}
	if hiS == "" {
		return attemptRange{lo, 0}, nil
	}
	hi, err := attemptNumber(hiS)
	if err != nil {
		return attemptRange{}, err
	}
	if hi < lo {
		return attemptRange{}, errors.New("range ends before it starts")
	}
	return attemptRange{lo, hi}, nil
}

func attemptNumber(s string) (int, error) {
	if s == "" {
		return 0, errors.New("missing attempt number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not an attempt number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxAttempt {
		return 0, fmt.Errorf("attempt %s is out of range", s)
	}
	return n, nil
}

// normalise sorts and merges ranges; a set covering every attempt becomes nil.
func normalise(rs []attemptRange) AttemptSet {
	slices.SortFunc(rs, func(a, b attemptRange) int { return a.lo - b.lo })
	var out []attemptRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.hi == 0 {
				continue // open range already covers r
			}
			if r.lo <= last.hi+1 {
				if r.hi == 0 || r.hi > last.hi {
					last.hi = r.hi
				}
				continue
			}
		}
		out = append(out, r)
	}
	if len(out) == 1 && out[0] == (attemptRange{1, 0}) {
		return AttemptSet{}
	}
	return AttemptSet{ranges: out}
}

// All reports whether the set is every attempt.
func (s AttemptSet) All() bool { return s.ranges == nil }

// Contains reports whether attempt a is in the set.
func (s AttemptSet) Contains(a int) bool {
	if a < 1 {
		return false
	}
	if s.ranges == nil {
		return true
	}
	for _, r := range s.ranges {
		if a >= r.lo && (r.hi == 0 || a <= r.hi) {
			return true
		}
	}
	return false
}

// countBelow returns how many attempts of the set are in 1..a-1.
func (s AttemptSet) countBelow(a int) int {
	if a <= 1 {
		return 0
	}
	if s.ranges == nil {
		return a - 1
	}
	n := 0
	for _, r := range s.ranges {
		hi := a - 1
		if r.hi != 0 && r.hi < hi {
			hi = r.hi
		}
		if hi >= r.lo {
			n += hi - r.lo + 1
		}
	}
	return n
}

// String renders the set in canonical form: "all", or items such as "1-3,5,7-".
func (s AttemptSet) String() string {
	if s.ranges == nil {
		return "all"
	}
	parts := make([]string, len(s.ranges))
	for i, r := range s.ranges {
		switch {
		case r.hi == 0:
			parts[i] = fmt.Sprintf("%d-", r.lo)
		case r.hi == r.lo:
			parts[i] = strconv.Itoa(r.lo)
		default:
			parts[i] = fmt.Sprintf("%d-%d", r.lo, r.hi)
		}
	}
	return strings.Join(parts, ",")
}
