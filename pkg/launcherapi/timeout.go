package launcherapi

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// StartTimeout is the QEMU start timeout: the launcher fails the launch
// (QemuStartTimeout) when the domain is not running Base + a jitter drawn
// uniformly from [0, Jitter) after Scheduled.
type StartTimeout struct {
	// Base is the timeout without jitter.
	Base time.Duration
	// Jitter is the width of the uniform jitter added to Base; zero means
	// the timeout is exactly Base.
	Jitter time.Duration
}

// DefaultStartTimeout is KubeVirt's: virt-controller's
// launcherQemuTimeout (240 s) plus qemuTimeoutJitterRange (120 s), whole
// seconds (pkg/virt-controller/services/template.go), so 4 to 6 minutes.
var DefaultStartTimeout = StartTimeout{Base: 240 * time.Second, Jitter: 120 * time.Second}

// FixedStartTimeout is a timeout already drawn: no further jitter.
func FixedStartTimeout(d time.Duration) StartTimeout { return StartTimeout{Base: d} }

// Validate checks that Base is positive and Jitter not negative; the
// error names the launcher flag at fault.
func (t StartTimeout) Validate() error {
	if t.Base <= 0 {
		return fmt.Errorf("--qemu-timeout must be positive, got %v", t.Base)
	}
	if t.Jitter < 0 {
		return fmt.Errorf("--qemu-timeout-jitter must not be negative, got %v", t.Jitter)
	}
	return nil
}

// Draw returns the effective timeout. Like KubeVirt (rand.Intn(120)+240,
// rendered as whole seconds) the jitter is a whole number of seconds in
// [0, Jitter) when Jitter is at least a second; a shorter jitter is drawn
// in nanoseconds. Draw always takes exactly one value from r when Jitter
// is positive, and none otherwise.
func (t StartTimeout) Draw(r *rand.Rand) time.Duration {
	switch {
	case t.Jitter <= 0:
		return t.Base
	case t.Jitter >= time.Second:
		return t.Base + time.Duration(r.Int64N(int64(t.Jitter/time.Second)))*time.Second
	default:
		return t.Base + time.Duration(r.Int64N(int64(t.Jitter)))
	}
}

// FormatDuration renders d for a launcher flag: whole seconds as KubeVirt
// renders its timeout ("283s"), anything finer as Go's Duration.String.
func FormatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return d.String()
}
