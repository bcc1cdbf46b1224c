package main

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// textLines writes one line per controller event for a person reading a
// log: time, VM, attempt, event, printable status, failure count, and the
// backoff with its time scale when one is planned.
type textLines struct {
	mu sync.Mutex
	w  io.Writer
}

// Observe implements controller.Observer.
func (t *textLines) Observe(e controller.Event) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-18s", e.Time.Format("15:04:05.000"), e.Event)
	if e.VM != "" {
		fmt.Fprintf(&b, "  %s", e.VM)
	}
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " #%d", e.Attempt)
	}
	if e.PrintableStatus != "" {
		fmt.Fprintf(&b, "  %s", e.PrintableStatus)
	}
	if e.Phase != "" {
		fmt.Fprintf(&b, " (VMI %s)", e.Phase)
	}
	if e.VM != "" {
		fmt.Fprintf(&b, "  failures=%d", e.FailCount)
	}
	if e.ScaledDelay != "" {
		fmt.Fprintf(&b, "  retry in %s (KubeVirt %s x%g)", e.ScaledDelay, e.Delay, e.TimeScale)
	}
	if e.Event == controller.EventControllerStarted {
		fmt.Fprintf(&b, "  seed=%d timeScale=%g %s", e.Seed, e.TimeScale, e.Policy)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, "  reason=%s", e.Reason)
	}
	if e.ExitCode != nil {
		fmt.Fprintf(&b, "  exit=%d", *e.ExitCode)
	}
	if e.Message != "" && e.Event != controller.EventExited {
		msg := e.Message
		if len(msg) > 140 {
			msg = msg[:140] + "..."
		}
		fmt.Fprintf(&b, "  %q", msg)
	}
	b.WriteByte('\n')
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.w, b.String())
}
