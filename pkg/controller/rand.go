package controller

import (
	"hash/fnv"
	"math/rand/v2"
)

// countingSource is a PCG source that counts its draws, so that a VM's
// random sequence can be resumed after a restart by replaying the count.
type countingSource struct {
	pcg   *rand.PCG
	draws uint64
}

// Uint64 implements rand.Source.
func (s *countingSource) Uint64() uint64 {
	s.draws++
	return s.pcg.Uint64()
}

// vmRand returns the random source of one VM: seeded by the controller's
// seed and the VM's key, so each VM's jitter is reproducible however VMs
// interleave, advanced past the draws already made.
func vmRand(seed uint64, k Key, draws uint64) (*rand.Rand, *countingSource) {
	src := &countingSource{pcg: rand.NewPCG(seed, hashKey(k))}
	for range draws {
		src.Uint64()
	}
	return rand.New(src), src
}

func hashKey(k Key) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(k.String()))
	return h.Sum64()
}

// launcherSeed derives the --seed of one launch from the controller seed,
// the VM and the attempt, without drawing from the VM's source.
func launcherSeed(seed uint64, k Key, attempt int) uint64 {
	x := seed ^ hashKey(k) ^ (uint64(attempt) * 0x9e3779b97f4a7c15)
	// splitmix64 finaliser
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x & (1<<63 - 1)
}
