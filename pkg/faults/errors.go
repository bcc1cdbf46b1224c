package faults

import (
	"errors"
	"fmt"
	"strings"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
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
// Every piece that can carry input is cut to about launcherapi.QuoteMax bytes, so a
// megabyte of bad annotation gives a line, not a megabyte.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults: %s: %v", launcherapi.Cut(e.Source, launcherapi.QuoteMax), e.Kind)
	if e.Part != "" {
		b.WriteString(" " + launcherapi.Quote(e.Part))
	}
	if e.Detail != "" {
		b.WriteString(": " + launcherapi.Cut(e.Detail, 2*launcherapi.QuoteMax))
	}
	if e.Err != nil {
		b.WriteString(": " + launcherapi.Cut(e.Err.Error(), launcherapi.QuoteMax))
	}
	if len(e.Allowed) > 0 {
		allowed := e.Allowed
		more := ""
		if len(allowed) > maxAllowed {
			allowed, more = allowed[:maxAllowed], fmt.Sprintf(", and %d more", len(e.Allowed)-maxAllowed)
		}
		b.WriteString(" (allowed: " + launcherapi.Cut(strings.Join(allowed, ", "), 4*launcherapi.QuoteMax) + more + ")")
	}
	return b.String()
}

// maxAllowed is how many allowed values a message lists (a bad value is
// quoted in at most launcherapi.QuoteMax bytes).
const maxAllowed = 20

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
