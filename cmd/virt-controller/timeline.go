package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/ctltimeline"
)

// timelineFlushInterval is how often a changed timeline is rewritten
// during a run.
const timelineFlushInterval = time.Second

// extraRunFlags are the "virt-controller run" flags for evidence and for
// negative controls, kept apart from the core flags.
type extraRunFlags struct {
	timeline string
	noJitter bool
}

func addExtraRunFlags(fs *pflag.FlagSet) *extraRunFlags {
	x := &extraRunFlags{}
	fs.StringVar(&x.timeline, "timeline", "", "write the run's per-attempt timeline to FILE.jsonl and FILE.svg (rewritten every second while it changes, and at exit)")
	fs.BoolVar(&x.noJitter, "backoff-no-jitter", false, "NEGATIVE CONTROL ONLY: drop the backoff curve's jitter, so VMs that fail together retry in lockstep (a thundering herd); never use it to run VMs")
	return x
}

// apply changes the policy and wires the timeline recorder next to the
// observer already chosen. The returned function writes the timeline one
// last time; call it when the controller has stopped.
func (x *extraRunFlags) apply(cfg *controller.Config, maxDelay time.Duration) (finish func(), err error) {
	if x.noJitter {
		cfg.Policy.Curve = withoutJitter{curve: cfg.Policy.Curve}
		fmt.Fprintln(os.Stderr, "virt-controller: --backoff-no-jitter: backoff jitter is OFF (negative control); VMs failing together will retry together")
	}
	if x.timeline == "" {
		return func() {}, nil
	}
	rec := ctltimeline.NewRecorder("virt-controller run "+cfg.Policy.String(), cfg.StateDir, maxDelay)
	if err := rec.WriteFiles(x.timeline); err != nil {
		return nil, err
	}
	next := cfg.Observer
	cfg.Observer = controller.ObserverFunc(func(e controller.Event) {
		rec.Observe(e)
		if next != nil {
			next.Observe(e)
		}
	})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(timelineFlushInterval)
		defer t.Stop()
		written := uint64(0)
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if n := rec.Changes(); n != written {
					if err := rec.WriteFiles(x.timeline); err != nil {
						fmt.Fprintf(os.Stderr, "virt-controller: %v\n", err)
					}
					written = n
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		if err := rec.WriteFiles(x.timeline); err != nil {
			fmt.Fprintf(os.Stderr, "virt-controller: %v\n", err)
			return
		}
		fmt.Fprintf(os.Stderr, "virt-controller: timeline written to %s.jsonl and %s.svg\n", x.timeline, x.timeline)
	}, nil
}

// withoutJitter is a curve with its random part taken out: every draw is
// the smallest value. It exists for negative controls (a herd test must
// fail with it).
type withoutJitter struct{ curve backoff.Curve }

// Delay implements backoff.Curve.
func (c withoutJitter) Delay(failCount int, _ backoff.Rand) time.Duration {
	inner := c.curve
	if inner == nil {
		inner = backoff.KubeVirt{}
	}
	return inner.Delay(failCount, zeroRand{})
}

// String implements backoff.Curve.
func (c withoutJitter) String() string {
	inner := c.curve
	if inner == nil {
		inner = backoff.KubeVirt{}
	}
	return inner.String() + " WITHOUT JITTER"
}

// zeroRand always draws 0.
type zeroRand struct{}

// IntN implements backoff.Rand.
func (zeroRand) IntN(int) int { return 0 }
