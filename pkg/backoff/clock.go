package backoff

import "time"

// Clock is the time source the policy reads. k8s.io/utils/clock.PassiveClock
// and every clock of that package satisfy it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// Rand is the random source the policy draws jitter from. A *rand.Rand of
// math/rand/v2 satisfies it.
type Rand interface {
	// IntN returns a uniform integer in [0, n); n > 0.
	IntN(n int) int
}
