package faults

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseTerm parses the value of one fault term, [P%][N*][param=value,...],
// for the named fault. source names where the term came from, for errors.
func parseTerm(source, name, value string) (Spec, error) {
	fail := func(kind error, part, detail string, allowed []string, cause error) (Spec, error) {
		return Spec{}, &Error{Source: source, Kind: kind, Part: part, Detail: detail, Allowed: allowed, Err: cause}
	}
	idx := lookup(name)
	if idx < 0 {
		detail := ""
		if s, ok := suggest(name, Names()); ok {
			detail = fmt.Sprintf("did you mean %q?", s)
		}
		return fail(ErrUnknownFault, name, detail, Names(), nil)
	}
	def := &catalog[idx]
	spec := Spec{Fault: name, Probability: 100, params: map[string]any{}}

	rest := strings.TrimSpace(value)
	// P%: a '%' before any '=' or ',' ends the probability.
	if p, after, ok := modifierPrefix(rest, '%'); ok {
		prob, err := parseProbability(p)
		if err != nil {
			detail := "probability must be a percentage from 0 to 100, e.g. 30%"
			if strings.Contains(p, "*") {
				detail = "the probability P% must come before the count N*, e.g. 30%2*"
			}
			return fail(ErrBadValue, p+"%", detail, nil, err)
		}
		spec.Probability, rest = prob, after
	}
	// N*: a '*' before any '=' or ',' ends the count.
	if c, after, ok := modifierPrefix(rest, '*'); ok {
		n, err := parseCount(c)
		if err != nil {
			return fail(ErrBadValue, c+"*", "count must be a whole number of at least 1 (leave N* out for unlimited)", nil, err)
		}
		spec.Count, rest = n, after
	}

	items, err := splitParams(rest)
	if err != nil {
		return fail(ErrSyntax, err.part, err.detail, nil, nil)
	}
	given := map[string]bool{}
	for _, it := range items {
		p, ok := def.param(it.name)
		if !ok {
			detail := fmt.Sprintf("fault %s has no parameter %q", name, it.name)
			if s, ok := suggest(it.name, def.paramNames()); ok {
				detail += fmt.Sprintf("; did you mean %q?", s)
			}
			return fail(ErrUnknownParam, it.raw, detail, def.paramNames(), nil)
		}
		if given[it.name] {
			return fail(ErrDuplicateParam, it.raw, "", nil, nil)
		}
		given[it.name] = true
		v, err := p.kind.parse(it.value)
		if err != nil {
			return fail(ErrBadValue, it.raw, "", p.Allowed, err)
		}
		if def.wholeSeconds && (it.name == "after" || it.name == "delay") && v.(time.Duration)%time.Second != 0 {
			return fail(ErrBadValue, it.raw, fmt.Sprintf("fault %s counts %s in whole seconds inside the guest, e.g. 3s", name, it.name), nil, nil)
		}
		switch it.name {
		case "delay":
			spec.Delay = v.(time.Duration)
		case "attempts":
			spec.Attempts = v.(AttemptSet)
		default:
			spec.params[it.name] = v
		}
	}
	for _, p := range def.Params {
		if given[p.Name] {
			continue
		}
		if p.Required {
			return fail(ErrMissingParam, p.Name, fmt.Sprintf("fault %s needs %s=<%s>", name, p.Name, p.Type), nil, nil)
		}
		spec.params[p.Name] = p.def
	}
	return spec, nil
}

// modifierPrefix splits s at the first sep if no '=' or ',' comes before it.
func modifierPrefix(s string, sep byte) (before, after string, ok bool) {
	i := strings.IndexByte(s, sep)
	if i < 0 || strings.ContainsAny(s[:i], "=,") {
		return "", s, false
	}
	return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:]), true
}

// parseProbability accepts digits with an optional fraction, 0 to 100.
func parseProbability(s string) (float64, error) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if !allDigits(whole) || (hasFrac && !allDigits(frac)) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	p, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if p > 100 {
		return 0, fmt.Errorf("%s is above 100", s)
	}
	return p, nil
}

// parseCount accepts a whole number from 1 to MaxAttempt.
func parseCount(s string) (int, error) {
	if !allDigits(s) {
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxAttempt {
		return 0, fmt.Errorf("%s is out of range 1..%d", s, MaxAttempt)
	}
	return n, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// paramItem is one name=value item of a term; raw is the item as written.
type paramItem struct{ name, value, raw string }

type syntaxError struct{ part, detail string }

// splitParams splits "a=1,b=2" into items. The attempts value is itself a
// comma-separated list, so an item without '=' that follows attempts=...
// continues it: "attempts=1,3,5,delay=1s" is attempts 1,3,5 and a delay.
// Items are slices of s, so a long attempts list costs linear time.
func splitParams(s string) ([]paramItem, *syntaxError) {
	if s == "" {
		return nil, nil
	}
	type span struct{ start, end int }
	var spans []span
	for start := 0; start <= len(s); {
		end := strings.IndexByte(s[start:], ',')
		if end < 0 {
			end = len(s)
		} else {
			end += start
		}
		seg := strings.TrimSpace(s[start:end])
		if !strings.Contains(seg, "=") {
			n := len(spans)
			if n == 0 || seg == "" || !isAttempts(s[spans[n-1].start:spans[n-1].end]) {
				return nil, &syntaxError{seg, termSyntaxHint(seg)}
			}
			spans[n-1].end = end
		} else {
			spans = append(spans, span{start, end})
		}
		start = end + 1
	}
	items := make([]paramItem, len(spans))
	for i, sp := range spans {
		raw := strings.TrimSpace(s[sp.start:sp.end])
		name, value, _ := strings.Cut(raw, "=")
		items[i] = paramItem{name: strings.TrimSpace(name), value: strings.TrimSpace(value), raw: raw}
	}
	return items, nil
}

// isAttempts reports whether a raw item sets the attempts modifier.
func isAttempts(raw string) bool {
	name, _, _ := strings.Cut(raw, "=")
	return strings.TrimSpace(name) == "attempts"
}

func termSyntaxHint(raw string) string {
	const grammar = "want [P%][N*][param=value,...], e.g. 30%2*signal=SIGTERM,after=5s"
	switch {
	case raw == "":
		return "empty parameter; " + grammar
	case strings.HasSuffix(raw, "%"):
		return "the probability P% must come first; " + grammar
	case strings.HasSuffix(raw, "*"):
		return "the count N* must come right after P%; " + grammar
	}
	return "not param=value; " + grammar
}
