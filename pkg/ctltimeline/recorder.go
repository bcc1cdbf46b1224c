// Package ctltimeline draws the local controller's crash loops: a Recorder
// turns the controller's Events (live, as its Observer, or read back from
// its JSON lines) into a timeline.Timeline, with each attempt's fault read
// from its launch folder.
package ctltimeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/timeline"
)

// Recorder is a controller.Observer that turns the controller's Events into a
// timeline.Timeline: per VM and attempt the phases with their times, the
// reason it ended, the failure count, the planned and the observed delay
// before the next start, and KubeVirt's envelope for that count (scaled),
// so a run under any --backoff preset is drawn against KubeVirt's rule.
// The fault of each attempt is read from the launcher's own folder (its
// Scheduled and FaultFired events, and the fail-fast annotation of its
// VMI) when the timeline is taken.
//
// It is fed either live, as the controller's Observer (virt-controller run
// --timeline), or afterwards from the controller's JSON lines decoded into
// Events (the functional suites do that). Safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	title    string
	stateDir string
	envelope backoff.KubeVirt
	seed     launcherapi.Seed
	scale    float64
	vms      map[string]*vmTimeline
	changes  uint64
}

type vmTimeline struct {
	attempts map[int]*timeline.Attempt
	// waiting is the attempt whose planned retry is still to be observed.
	waiting *timeline.Attempt
	failAt  time.Time
}

// NewRecorder returns an empty recorder. stateDir is the
// controller's state folder, where the launcher folders are; empty means
// the folder the ControllerStarted event names. maxDelay is the cap of
// KubeVirt's curve used for the envelope (zero: 300 s).
func NewRecorder(title, stateDir string, maxDelay time.Duration) *Recorder {
	return &Recorder{title: title, stateDir: stateDir, envelope: backoff.KubeVirt{MaxDelay: maxDelay},
		scale: 1, vms: map[string]*vmTimeline{}}
}

// Observe implements controller.Observer.
func (r *Recorder) Observe(e controller.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes++
	if e.Event == controller.EventControllerStarted {
		if r.stateDir == "" {
			r.stateDir = e.StateDir
		}
	}
	if e.Seed != 0 {
		r.seed = e.Seed
	}
	if e.TimeScale > 0 {
		r.scale = e.TimeScale
	}
	if e.VM == "" {
		return
	}
	vt := r.vms[e.VM]
	if vt == nil {
		vt = &vmTimeline{attempts: map[int]*timeline.Attempt{}}
		r.vms[e.VM] = vt
	}
	a := vt.attempts[e.Attempt]
	if a == nil && e.Attempt > 0 {
		a = &timeline.Attempt{VM: e.VM, Attempt: e.Attempt, UID: e.VMIUID}
		vt.attempts[e.Attempt] = a
	}
	switch e.Event {
	case controller.EventStarted:
		a.UID = e.VMIUID
		a.Phases = append(a.Phases, timeline.PhaseAt{Phase: string(v1.Pending), At: e.Time})
		if w := vt.waiting; w != nil && w != a {
			w.Observed = e.Time.Sub(vt.failAt)
		}
		vt.waiting = nil
	case controller.EventScheduled, controller.EventRunning, controller.EventGuestReady, controller.EventSucceeded, controller.EventFailed:
		if a != nil {
			a.Phases = append(a.Phases, timeline.PhaseAt{Phase: string(e.Event), At: e.Time})
			if e.Reason != "" {
				a.Reason = e.Reason
			}
		}
	case controller.EventExited:
		if a != nil {
			if !hasPhase(a, string(v1.Failed)) && !hasPhase(a, string(v1.Succeeded)) && e.Phase != "" {
				a.Phases = append(a.Phases, timeline.PhaseAt{Phase: e.Phase, At: e.Time})
			}
			if e.Reason != "" {
				a.Reason = e.Reason
			}
		}
	case controller.EventBackoffPlanned, controller.EventGaveUp:
		if a != nil {
			a.FailCount = e.FailCount
			lo, hi := r.envelope.Bounds(e.FailCount)
			a.Low, a.High = scaleBy(lo, r.scale), scaleBy(hi, r.scale)
			if e.Event == controller.EventBackoffPlanned {
				a.Planned = time.Duration(e.ScaledDelayNs)
				vt.waiting, vt.failAt = a, e.Time
			}
		}
	}
	if e.Event.ManualOperation() {
		// A manual operation clears the record: the next start is not a
		// retry, so no delay is observed across it.
		vt.waiting = nil
	}
}

func hasPhase(a *timeline.Attempt, phase string) bool {
	for _, p := range a.Phases {
		if p.Phase == phase {
			return true
		}
	}
	return false
}

func scaleBy(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// Changes counts the events observed so far, so a caller can tell whether
// the timeline changed since it last wrote it.
func (r *Recorder) Changes() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changes
}

// Timeline returns a copy of what was recorded, with each attempt's fault
// filled in from its launcher folder.
func (r *Recorder) Timeline() *timeline.Timeline {
	r.mu.Lock()
	t := &timeline.Timeline{Title: r.title, Seed: r.seed, TimeScale: r.scale}
	type pending struct {
		i   int
		key controller.Key
	}
	var todo []pending
	names := make([]string, 0, len(r.vms))
	for n := range r.vms {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		k, _ := controller.ParseKey(n)
		for _, a := range r.vms[n].attempts {
			c := *a
			c.Phases = append([]timeline.PhaseAt(nil), a.Phases...)
			t.Attempts = append(t.Attempts, c)
			todo = append(todo, pending{len(t.Attempts) - 1, k})
		}
	}
	r.mu.Unlock()
	for _, p := range todo {
		a := &t.Attempts[p.i]
		if r.stateDir != "" && a.UID != "" {
			a.Fault = attemptFaults(controller.LauncherDir(r.stateDir, p.key, a.Attempt, a.UID))
		}
	}
	return t
}

// attemptFaults names the faults that acted on one launch, from the files
// its launcher left: the faults its Scheduled event said would fire, those
// it reported firing, and KubeVirt's fail-fast annotation (which crashes
// the launcher before it can say anything).
func attemptFaults(dir launcherapi.Dir) string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if data, err := os.ReadFile(dir.Manifest()); err == nil {
		var vmi v1.VirtualMachineInstance
		if json.Unmarshal(data, &vmi) == nil {
			if _, ok := vmi.Annotations[v1.FuncTestLauncherFailFastAnnotation]; ok {
				add("simulate-crash")
			}
		}
	}
	evs, _ := launcherapi.ReadEvents(dir.Events())
	for _, ev := range evs {
		// Scheduled lists the faults that will fire.
		if ev.Scheduled != nil {
			for _, d := range ev.Scheduled.Faults {
				add(d.Fault)
			}
		}
		add(ev.Fault)
	}
	return strings.Join(names, "+")
}

// WriteFiles writes the timeline to base+".jsonl" and base+".svg", each
// replaced atomically so a reader never sees half a file.
func (r *Recorder) WriteFiles(base string) error {
	t := r.Timeline()
	if dir := filepath.Dir(base); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("timeline folder: %w", err)
		}
	}
	for _, out := range []struct {
		ext   string
		write func(*os.File) error
	}{
		{".jsonl", func(f *os.File) error { return t.WriteJSONLines(f) }},
		{".svg", func(f *os.File) error { return t.WriteSVG(f) }},
	} {
		tmp, err := os.CreateTemp(filepath.Dir(base), filepath.Base(base)+out.ext+".tmp-*")
		if err != nil {
			return fmt.Errorf("timeline %s: %w", base+out.ext, err)
		}
		err = out.write(tmp)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), base+out.ext)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("timeline %s: %w", base+out.ext, err)
		}
	}
	return nil
}
