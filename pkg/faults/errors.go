package faults

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The kinds of parse error. Every *Error wraps exactly one of them, so callers
// can test with errors.Is(err, faults.ErrUnknownFault) and the like.
var (
	// ErrSyntax: the term is not [P%][N*][param=value,...].
	ErrSyntax = errors.New("syntax error")
	// ErrUnknownFault: the fault name is not in the catalog.
	ErrUnknownFault = errors.New("unknown fault")
	// ErrUnknownParam: the fault has no such parameter.
	ErrUnknownParam = errors.New("unknown parameter")
	// ErrMissingParam: a required parameter is missing.
	ErrMissingParam = errors.New("missing required parameter")
	// ErrDuplicateParam: a parameter is given twice in one term.
	ErrDuplicateParam = errors.New("parameter given twice")
	// ErrBadValue: a probability, count or parameter value is not allowed.
	ErrBadValue = errors.New("bad value")
	// ErrDuplicateFault: the same fault is asked for twice (annotation and
	// flag, or two flags).
	ErrDuplicateFault = errors.New("fault given twice")
	// ErrUnknownDisk: disk-io-error names a disk the VMI does not have.
	ErrUnknownDisk = errors.New("unknown disk")
)

// Error is a fault term that cannot be used. Its message names the source of
// the term, the bad part and what is allowed instead.
type Error struct {
	// Source names where the term came from, e.g.
	// `annotation "faults.crashloop.dev/qemu-kill"` or `--fault "qemu-kill=..."`.
	Source string
	// Kind is one of the Err* values above.
	Kind error
	// Part is the offending part of the term, e.g. "signal=SIGFOO" or "150%".
	Part string
	// Detail says what is wrong with Part, beyond Kind; may be empty.
	Detail string
	// Allowed lists what would have been accepted; may be empty.
	Allowed []string
	// Err is the underlying cause, if any.
	Err error
}

// Error renders the message: source, kind, bad part, detail, allowed values.
// Every piece that can carry input is cut to about quoteMax bytes, so a
// megabyte of bad annotation gives a line, not a megabyte.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults: %s: %v", cut(e.Source, quoteMax), e.Kind)
	if e.Part != "" {
		b.WriteString(" " + quoteCut(e.Part))
	}
	if e.Detail != "" {
		b.WriteString(": " + cut(e.Detail, 2*quoteMax))
	}
	if e.Err != nil {
		b.WriteString(": " + cut(e.Err.Error(), quoteMax))
	}
	if len(e.Allowed) > 0 {
		allowed := e.Allowed
		more := ""
		if len(allowed) > maxAllowed {
			allowed, more = allowed[:maxAllowed], fmt.Sprintf(", and %d more", len(e.Allowed)-maxAllowed)
		}
		b.WriteString(" (allowed: " + cut(strings.Join(allowed, ", "), 4*quoteMax) + more + ")")
	}
	return b.String()
}

// quoteMax is how many bytes of a bad value a message quotes; maxAllowed
// how many allowed values it lists.
const (
	quoteMax   = 200
	maxAllowed = 20
)

// quoteCut quotes s as %q does, cut to quoteMax bytes on a rune boundary
// with its full length after it when longer.
func quoteCut(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:runeCut(s, quoteMax)]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// cut is s, or its first n bytes (on a rune boundary) and its length.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeCut(s, n)] + fmt.Sprintf("… (%d bytes)", len(s))
}

// runeCut is the largest i <= n at which s can be cut without splitting
// a UTF-8 sequence.
func runeCut(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// Unwrap returns the kind and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := []error{e.Kind}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// suggest returns the candidate closest to s by edit distance, if it is close
// enough to be a likely typo.
func suggest(s string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD >= 0 && bestD <= 2 && bestD < len(s)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
