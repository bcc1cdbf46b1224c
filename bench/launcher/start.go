package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// shares are warm starts to Running, split at the Scheduled event and at
// the domain start call.
type shares struct{ running, scheduled, connect, startCall sample }

func (s *shares) add(res launchResult) {
	s.running, s.scheduled, s.startCall = append(s.running, res.running), append(s.scheduled, res.scheduled), append(s.startCall, res.startCall)
	s.connect = append(s.connect, res.running-res.scheduled-res.startCall)
}

// rows adds the whole start as name and its shares below it.
func (s *shares) rows(t *table, name, prefix string) {
	t.add(name, "", s.running)
	t.add(prefix+"exec -> Scheduled (front, converter, runner's start)", "share", s.scheduled)
	t.add(prefix+"Scheduled -> domain start call (embedded driver, define)", "share", s.connect)
	t.add(prefix+"domain start call -> Running (libvirt's start, QEMU)", "share", s.startCall)
}

// startRows are one pair's warm starts to Running, each next to a `virsh
// create` of the same domain, and their shares.
type startRows struct {
	shares
	pair                       *libvirtPair
	create                     func() (time.Duration, error)
	virsh, virshVersion, enter sample
}

// measureStart times warm launches to Running (QEMU killed right after,
// the launch then ends with Failed) against `virsh create` of the same
// domain, -pairs times, on the host's libvirt and QEMU and, with
// -backports-root, on the root's. Every launch has its own `virsh create`
// beside it and the order turns every round (launcher or virsh first, one
// pair or the other first), so that load coming and going weighs on both
// sides of each ratio alike; the rows are medians of the paired ratios.
func (b *bench) measureStart(r *results) error {
	host, err := b.hostPair()
	if err != nil {
		return err
	}
	pairs := []*libvirtPair{host}
	if b.backportsRoot != "" {
		bp, err := b.rootPair(b.backportsRoot)
		if err != nil {
			return err
		}
		defer bp.close()
		pairs = append(pairs, bp)
	}
	var rows []*startRows
	for _, p := range pairs {
		// The first launch with a fresh cache probes QEMU's capabilities.
		if _, err := b.launch(append(b.pin(), p.enter...), b.args(p.cache, nil), false); err != nil {
			return fmt.Errorf("filling the warm cache (%s): %w", p.name, err)
		}
		create, stop, err := b.virshCreate(p)
		if err != nil {
			return err
		}
		defer stop()
		rows = append(rows, &startRows{pair: p, create: create})
	}
	for i := range b.pairs {
		order := slices.Clone(rows)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			if err := s.round(b, (i/2)%2 == 1); err != nil {
				return err
			}
		}
	}
	r.start = rows
	return nil
}

// round is one warm launch and one `virsh create`, in the order given,
// then `virsh version` and, in a root, what entering it costs alone.
func (s *startRows) round(b *bench, virshFirst bool) error {
	launch := func() error {
		res, err := b.launch(append(b.pin(), s.pair.enter...), b.args(s.pair.cache, nil), false)
		if err != nil {
			return fmt.Errorf("warm launch (%s): %w", s.pair.name, err)
		}
		s.add(res)
		return nil
	}
	virsh := func() error {
		d, err := s.create()
		s.virsh = append(s.virsh, d)
		return err
	}
	steps := []func() error{launch, virsh}
	if virshFirst {
		slices.Reverse(steps)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	d, err := virshConnect(s.pair)
	if err != nil {
		return err
	}
	s.virshVersion = append(s.virshVersion, d)
	if s.pair.enter != nil {
		start := time.Now()
		if out, err := s.pair.command("true").CombinedOutput(); err != nil {
			return fmt.Errorf("entering the root alone: %v: %s", err, out)
		}
		s.enter = append(s.enter, time.Since(start))
	}
	return nil
}

// rows adds the pair's rows to the table.
func (s *startRows) rows(t *table) {
	p := s.pair
	t.add(fmt.Sprintf("start on %s (%s): virsh create, warm libvirtd, same XML", p.name, p.versions), "anchor", s.virsh)
	s.shares.rows(t, fmt.Sprintf("start on %s: launcher exec -> Running", p.name), "  ")
	t.add("  virsh version (virsh's own share of create)", "share", s.virshVersion)
	t.add("  entering the root alone (nsenter ... true), in both sides above", "share", s.enter)
	t.pairedRatio(fmt.Sprintf("  warm Running / virsh create on %s", p.name), "<= 1.0x", s.running, s.virsh)
}

// waitChrooted waits until the holder pid runs sleep inside root (its
// mounts are made then).
func waitChrooted(pid int, root string, stderr *strings.Builder) error {
	want, err := filepath.Abs(root)
	if err == nil {
		want, err = filepath.EvalSymlinks(want)
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got, _ := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if got == want && strings.TrimSpace(string(comm)) == "sleep" {
			return nil
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("entering %s: the holder did not reach sleep within 10s: %s", root, stderr.String())
}
