package launcherapi

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// QuoteMax is how many bytes of a refused value an error message quotes:
// a bad value is named, never echoed whole (a megabyte of annotation is one
// short line).
const QuoteMax = 200

// Quote quotes s as %q does, cut to QuoteMax bytes on a rune boundary and
// followed by its length when longer.
func Quote(s string) string {
	if len(s) <= QuoteMax {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:runeCut(s, QuoteMax)]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// Cut is s, or its first n bytes (on a rune boundary) followed by its
// length, for text that is not quoted.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeCut(s, n)] + fmt.Sprintf("… (%d bytes)", len(s))
}

// runeCut is the largest i <= n at which s can be cut without splitting a
// UTF-8 sequence.
func runeCut(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
