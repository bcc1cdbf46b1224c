package launcherapi

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
)

// Follower is the one reader of a launcher's event lines: it decodes each
// line of the stream (a launcher's stdout as it comes, or its events file,
// Dir.Events, read as it grows) and hands the event on. Empty lines are
// skipped; a line that is not an event goes to the bad-line function, if
// any. Lines are cut by the caller (spawn.LineWriter, bufio.Scanner).
type Follower struct {
	event func(Event)
	bad   func(line []byte, err error)
}

// NewFollower returns a Follower calling event for every event line and
// bad (which may be nil) for every other non-empty line; neither may keep
// line.
func NewFollower(event func(Event), bad func(line []byte, err error)) *Follower {
	return &Follower{event: event, bad: bad}
}

// Line decodes one line, without its newline, and hands it on.
func (f *Follower) Line(line []byte) {
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
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f.Line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading launcher events %s: %w", path, err)
	}
	return out, nil
}
