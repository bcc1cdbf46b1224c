package launcher

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Emitter writes a launch's events (launcherapi.Event), one per line, as
// JSON (launcherapi.FormatJSON, the contract) or as text for people
// (launcherapi.FormatText). It is safe for concurrent use.
type Emitter struct {
	mu     sync.Mutex
	w      io.Writer
	format string
	base   launcherapi.Event
}

// NewEmitter writes events about one VMI to w in format. base supplies the
// VMI identity and the attempt copied into every event.
func NewEmitter(w io.Writer, format string, base launcherapi.Event) *Emitter {
	return &Emitter{w: w, format: format, base: base}
}

// Emit stamps ev with the VMI identity and writes it.
func (e *Emitter) Emit(ev launcherapi.Event) error {
	ev.VMI, ev.Namespace, ev.UID = e.base.VMI, e.base.Namespace, e.base.UID
	if ev.Attempt == 0 {
		ev.Attempt = e.base.Attempt
	}
	ev.Time = ev.Time.UTC()
	var line []byte
	if e.format == launcherapi.FormatText {
		line = []byte(textLine(ev))
	} else {
		var err error
		if line, err = ev.MarshalLine(); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(line); err != nil {
		return fmt.Errorf("writing event: %w", err)
	}
	return nil
}

func textLine(ev launcherapi.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-10s  %s/%s", ev.Time.Format("15:04:05.000"), ev.Event, ev.Namespace, ev.VMI)
	if ev.Phase != "" && ev.Phase != ev.Event {
		fmt.Fprintf(&b, "  phase=%s", ev.Phase)
	}
	if ev.Fault != "" {
		fmt.Fprintf(&b, "  fault=%s", ev.Fault)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, "  reason=%s", ev.Reason)
	}
	if ev.ExitCode != nil {
		fmt.Fprintf(&b, "  exit=%d", *ev.ExitCode)
	}
	details := detailsOf(ev)
	keys := make([]string, 0, len(details))
	for k := range details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := details[k]
		if s, ok := v.(string); ok && strings.ContainsAny(s, " \t") {
			v = fmt.Sprintf("%q", s)
		} else if _, ok := v.(string); !ok {
			if j, err := json.Marshal(v); err == nil {
				v = string(j)
			}
		}
		fmt.Fprintf(&b, "  %s=%v", k, v)
	}
	if ev.Message != "" {
		fmt.Fprintf(&b, "  %q", ev.Message)
	}
	b.WriteByte('\n')
	return b.String()
}

// detailsOf is the event's typed values as their JSON keys, for the text
// line: one key=value item each.
func detailsOf(ev launcherapi.Event) map[string]any {
	var v any
	switch {
	case ev.Scheduled != nil:
		v = ev.Scheduled
	case ev.Running != nil:
		v = ev.Running
	case ev.Fired != nil:
		v = ev.Fired
	default:
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out map[string]any
	if json.Unmarshal(data, &out) != nil {
		return nil
	}
	return out
}
