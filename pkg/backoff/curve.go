package backoff

import (
	"fmt"
	"math"
	"time"
)

// Curve maps a consecutive failure count to the (unscaled) delay before the
// next start.
type Curve interface {
	// Delay returns the wait after the failCount-th consecutive failure.
	// Counts below one are treated as one.
	Delay(failCount int, r Rand) time.Duration
	// String names the curve for logs and status output.
	String() string
}

// DefaultMaxDelay is KubeVirt's cap on the start-failure backoff.
const DefaultMaxDelay = 300 * time.Second

// kubeVirtMinInterval is KubeVirt's floor for the base interval.
const kubeVirtMinInterval = 10 * time.Second

// KubeVirt is the start backoff of KubeVirt's VM controller:
// interval = max(MaxDelay/30, 10 s), delay = interval*n² plus a uniform
// jitter of [0, delay/2] whole seconds, capped at MaxDelay.
type KubeVirt struct {
	// MaxDelay caps the delay; zero means DefaultMaxDelay. It is used in
	// whole seconds, as upstream.
	MaxDelay time.Duration
}

// Delay implements Curve. It draws exactly one jitter value per call, even
// when the result is capped, as upstream's calculateStartBackoffTime does
// (it always calls rand.Intn(base/2+1) and caps afterwards), so a seeded
// source is consumed at the same pace as upstream's. r must not be nil.
func (k KubeVirt) Delay(failCount int, r Rand) time.Duration {
	maxSec := int64(k.maxDelay() / time.Second)
	// Counts above 2^15 give the cap for any sane MaxDelay; clamping keeps
	// interval*n*n from overflowing. Upstream would overflow there instead,
	// at counts no VM reaches.
	n := int64(min(max(failCount, 1), 1<<15))
	interval := max(maxSec/30, int64(kubeVirtMinInterval/time.Second))
	delay := interval * n * n
	delay += int64(r.IntN(int(delay/2) + 1))
	return time.Duration(min(delay, maxSec)) * time.Second
}

// Bounds returns the smallest and largest delay Delay can return for
// failCount, so that callers and tests can check a draw.
func (k KubeVirt) Bounds(failCount int) (lo, hi time.Duration) {
	maxSec := int64(k.maxDelay() / time.Second)
	n := int64(max(failCount, 1))
	if n > 1<<15 {
		return k.maxDelay(), k.maxDelay()
	}
	interval := max(maxSec/30, int64(kubeVirtMinInterval/time.Second))
	base := interval * n * n
	return time.Duration(min(base, maxSec)) * time.Second,
		time.Duration(min(base+base/2, maxSec)) * time.Second
}

func (k KubeVirt) maxDelay() time.Duration {
	if k.MaxDelay <= 0 {
		return DefaultMaxDelay
	}
	return k.MaxDelay.Truncate(time.Second)
}

// String implements Curve.
func (k KubeVirt) String() string { return fmt.Sprintf("kubevirt(max %s)", k.maxDelay()) }

// Exponential doubles (or multiplies by Factor) from Initial up to Max
// without jitter: the kubelet's container restart backoff.
type Exponential struct {
	// Initial is the delay after the first failure.
	Initial time.Duration
	// Max caps the delay.
	Max time.Duration
	// Factor multiplies the delay per further failure; zero means 2.
	Factor float64
}

// Delay implements Curve.
func (e Exponential) Delay(failCount int, _ Rand) time.Duration {
	f := e.Factor
	if f <= 1 {
		f = 2
	}
	d := float64(e.Initial) * math.Pow(f, float64(max(failCount, 1)-1))
	if d >= float64(e.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return e.Max
	}
	return time.Duration(d)
}

// String implements Curve.
func (e Exponential) String() string {
	return fmt.Sprintf("exponential(%s..%s)", e.Initial, e.Max)
}

// Steps grows the delay geometrically from Initial to Max over Steps
// failures, like systemd's RestartSec, RestartSteps and RestartMaxDelaySec.
type Steps struct {
	// Initial is the delay after the first failure.
	Initial time.Duration
	// Max is reached after Steps further failures and kept from then on.
	Max time.Duration
	// Steps is the number of increments between Initial and Max; zero or
	// less means the delay jumps to Max after the first failure.
	Steps int
}

// Delay implements Curve.
func (s Steps) Delay(failCount int, _ Rand) time.Duration {
	step := max(failCount, 1) - 1
	if s.Steps <= 0 {
		if step == 0 {
			return s.Initial
		}
		return s.Max
	}
	if step >= s.Steps || s.Initial <= 0 {
		return s.Max
	}
	ratio := float64(s.Max) / float64(s.Initial)
	return time.Duration(float64(s.Initial) * math.Pow(ratio, float64(step)/float64(s.Steps)))
}

// String implements Curve.
func (s Steps) String() string {
	return fmt.Sprintf("steps(%s..%s in %d)", s.Initial, s.Max, s.Steps)
}
