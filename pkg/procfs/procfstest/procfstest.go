// Package procfstest holds the process-group wait that the tests of
// several packages share: a test that stops a process group waits, with a
// deadline, until the kernel reports none of its members alive.
package procfstest

import (
	"testing"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/procfs"
)

// AwaitGroupGone waits up to d for process group pgid to be empty and
// returns the members still alive then (none on success).
func AwaitGroupGone(t testing.TB, pgid int, d time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m, err := procfs.GroupMembers(pgid)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 || time.Now().After(deadline) {
			return m
		}
		time.Sleep(20 * time.Millisecond) // a killed process may still be exiting
	}
}
