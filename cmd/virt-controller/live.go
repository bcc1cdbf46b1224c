package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crashloop-harness/crashloop/pkg/controller"
)

// liveView redraws a table of all VMs on a terminal a few times a second
// and keeps the last few events under it.
type liveView struct {
	out io.Writer
	cfg controller.Config

	mu     sync.Mutex
	c      *controller.Controller
	recent []controller.Event
}

const liveEvents = 8

func newLiveView(out io.Writer, cfg controller.Config) *liveView {
	return &liveView{out: out, cfg: cfg}
}

// Observe implements controller.Observer.
func (v *liveView) Observe(e controller.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.recent = append(v.recent, e)
	if len(v.recent) > liveEvents {
		v.recent = v.recent[len(v.recent)-liveEvents:]
	}
}

func (v *liveView) run(ctx context.Context, c *controller.Controller) {
	v.mu.Lock()
	v.c = c
	v.mu.Unlock()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.draw()
		}
	}
}

// final draws once more so the last state stays on screen.
func (v *liveView) final() { v.draw() }

func (v *liveView) draw() {
	v.mu.Lock()
	c := v.c
	recent := append([]controller.Event(nil), v.recent...)
	v.mu.Unlock()
	if c == nil {
		return
	}
	rows, cols := termSize()
	snaps := c.Snapshots()
	now := time.Now()
	var b bytes.Buffer
	b.WriteString("\x1b[H\x1b[2J")
	scale := v.cfg.Policy.Scale
	fmt.Fprintf(&b, "virt-controller  seed %d  time-scale %g  %s  state %s  %s\n",
		v.cfg.Seed, scale, v.cfg.Policy, v.cfg.StateDir, now.Format("15:04:05"))
	fmt.Fprintf(&b, "%d VMs: %s\n\n", len(snaps), countByStatus(snaps))
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tATTEMPT\tPHASE\tSTATUS\tFAILS\tNEXT RETRY")
	budget := max(rows-8-liveEvents, 3)
	for i, s := range snaps {
		if i == budget {
			fmt.Fprintf(tw, "... %d more\t\t\t\t\t\n", len(snaps)-budget)
			break
		}
		phase := "-"
		if s.VMI != nil {
			phase = string(s.VMI.Status.Phase)
		}
		fails := 0
		if sf := s.VM.Status.StartFailure; sf != nil {
			fails = sf.ConsecutiveFailCount
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", controller.KeyOf(s.VM), s.Attempt, phase,
			s.VM.Status.PrintableStatus, fails, retryText(s, now))
	}
	_ = tw.Flush()
	b.WriteString("\nrecent events:\n")
	for _, e := range recent {
		line := fmt.Sprintf("%s %s %s", e.Time.Format("15:04:05.000"), e.VM, e.Event)
		if e.ScaledDelay != "" {
			line += fmt.Sprintf(" delay %s (x%g = %s)", e.Delay, e.TimeScale, e.ScaledDelay)
		}
		if e.Reason != "" {
			line += " " + e.Reason
		}
		if e.Message != "" {
			line += ": " + e.Message
		}
		if cols > 10 && len(line) > cols {
			line = line[:cols-1]
		}
		b.WriteString(line + "\n")
	}
	_, _ = v.out.Write(b.Bytes())
}

// retryText is the countdown to the next retry with the delay it comes
// from, e.g. "in 0.87s (1m30s x0.01)".
func retryText(s *controller.Snapshot, now time.Time) string {
	if s.GaveUp {
		return "gave up"
	}
	if s.RetryAfter == nil || s.VM.Status.StartFailure == nil {
		return "-"
	}
	left := s.RetryAfter.Sub(now)
	if left < 0 {
		left = 0
	}
	return fmt.Sprintf("in %s (%s x%g)", left.Round(10*time.Millisecond), s.Delay, s.TimeScale)
}

func countByStatus(snaps []*controller.Snapshot) string {
	counts := map[string]int{}
	for _, s := range snaps {
		counts[string(s.VM.Status.PrintableStatus)]++
	}
	var parts []string
	for k, n := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func termSize() (rows, cols int) {
	ws, err := unix.IoctlGetWinsize(int(os.Stdout.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 {
		return 40, 120
	}
	return int(ws.Row), int(ws.Col)
}
