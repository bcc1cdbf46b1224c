package launcherapi

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// Follower is the one reader of a launcher's event lines: bytes written
// to it (a launcher's stdout as it comes) or copied into it from the
// events file (Dir.Events, read as it grows) are cut into whole lines,
// and each line is decoded and handed on. Empty lines are skipped; a
// line that is not an event goes to the bad-line function, if any. Not
// safe for concurrent use: os/exec writes a child's output from one
// goroutine.
type Follower struct {
	event   func(Event)
	bad     func(line []byte, err error)
	partial []byte
}

// NewFollower returns a Follower calling event for every event line and
// bad (which may be nil) for every other non-empty line; neither may keep
// line.
func NewFollower(event func(Event), bad func(line []byte, err error)) *Follower {
	return &Follower{event: event, bad: bad}
}

// Write implements io.Writer: it hands on every line completed by b.
func (f *Follower) Write(b []byte) (int, error) {
	f.partial = append(f.partial, b...)
	for {
		i := bytes.IndexByte(f.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		f.line(f.partial[:i])
		f.partial = f.partial[i+1:]
	}
}

// Flush hands on a last line without a newline, once its writer is gone.
func (f *Follower) Flush() {
	if len(f.partial) > 0 {
		f.line(f.partial)
		f.partial = nil
	}
}

func (f *Follower) line(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	ev, err := ParseEvent(line)
	switch {
	case err == nil:
		f.event(ev)
	case f.bad != nil:
		f.bad(line, err)
	}
}

// ReadEvents reads every event of a finished events file (Dir.Events),
// skipping lines that are not events.
func ReadEvents(path string) ([]Event, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading launcher events: %w", err)
	}
	defer file.Close()
	var out []Event
	f := NewFollower(func(ev Event) { out = append(out, ev) }, nil)
	if _, err := io.Copy(f, file); err != nil {
		return out, fmt.Errorf("reading launcher events %s: %w", path, err)
	}
	f.Flush()
	return out, nil
}
