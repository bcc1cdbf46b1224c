package launcherapi

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Seed seeds every random draw of a launch (the start timeout's jitter,
// the fault decisions). Zero means "pick one": the launcher then picks a
// seed and reports it in its Scheduled event, so a run can be replayed.
// It implements pflag.Value, so --seed takes it directly.
type Seed uint64

// PickSeed returns a fresh non-zero seed from the time of day.
func PickSeed() Seed {
	s := Seed(uint64(time.Now().UnixNano()) & (1<<63 - 1))
	if s == 0 {
		s = 1
	}
	return s
}

// String renders the seed in decimal, as --seed takes it.
func (s Seed) String() string { return strconv.FormatUint(uint64(s), 10) }

// Set parses a decimal seed. Negative values (from older 64-bit signed
// seeds) are taken as their two's complement, so an old seed replays.
func (s *Seed) Set(v string) error {
	if u, err := strconv.ParseUint(v, 10, 64); err == nil {
		*s = Seed(u)
		return nil
	}
	i, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("seed %q: want a decimal integer", v)
	}
	*s = Seed(uint64(i))
	return nil
}

// Type names the flag's value type in usage text.
func (s *Seed) Type() string { return "uint64" }

// Rand returns a deterministic random source for one named stream of the
// seed, so that independent draws (the timeout, faults) do not shift each
// other when one of them is added or removed.
func (s Seed) Rand(stream string) *rand.Rand {
	var h uint64 = 14695981039346656037 // FNV-1a
	for i := 0; i < len(stream); i++ {
		h ^= uint64(stream[i])
		h *= 1099511628211
	}
	return rand.New(rand.NewPCG(uint64(s), h))
}
