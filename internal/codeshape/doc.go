// Package codeshape holds the repository's shape rules as a test: no
// non-test function over 100 lines, and no Go file under cmd/ over 250
// lines, so that commands stay thin over the packages and long functions
// are split along their steps. It has no code of its own.
package codeshape
