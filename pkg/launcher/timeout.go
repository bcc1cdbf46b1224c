package launcher

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// DrawTimeout returns base + uniform[0, jitter), drawn from r. A zero
// jitter returns base.
func DrawTimeout(base, jitter time.Duration, r *rand.Rand) time.Duration {
	if jitter <= 0 {
		return base
	}
	return base + time.Duration(r.Int64N(int64(jitter)))
}

// ValidateTimeout checks the start timeout flags.
func ValidateTimeout(base, jitter time.Duration) error {
	if base <= 0 {
		return fmt.Errorf("--qemu-timeout must be positive, got %v", base)
	}
	if jitter < 0 {
		return fmt.Errorf("--qemu-timeout-jitter must not be negative, got %v", jitter)
	}
	return nil
}

// Rand returns a deterministic random source for one named stream of a
// seed, so that independent draws (the timeout, faults) do not shift each
// other when one of them is added or removed.
func Rand(seed int64, stream string) *rand.Rand {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(stream); i++ {
		h ^= uint64(stream[i])
		h *= 1099511628211
	}
	return rand.New(rand.NewPCG(uint64(seed), h))
}
