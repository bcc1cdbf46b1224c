package controller

import (
	"hash/fnv"
	"math/rand/v2"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
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
func vmRand(seed launcherapi.Seed, k Key, draws uint64) (*rand.Rand, *countingSource) {
	src := &countingSource{pcg: rand.NewPCG(uint64(seed), hashKey(k))}
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

// launcherSeed derives the --seed of a VM's launchers from the controller
// seed and the VM, without drawing from the VM's source. It is the same for
// every attempt of the VM on purpose: the launcher mixes the attempt
// (--attempt) into each fault decision itself, and keeps a fault's count
// ("N*") without state by replaying the draws of earlier attempts with its
// own seed, which only matches what those attempts drew if they had the
// same seed. A seed per attempt let "50%2*" fire three or four times.
func launcherSeed(seed launcherapi.Seed, k Key, _ int) launcherapi.Seed {
	x := uint64(seed) ^ hashKey(k)
	// splitmix64 finaliser
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return launcherapi.Seed(x&(1<<63-1) | 1) // never 0, which the launcher reads as "pick one"
}
