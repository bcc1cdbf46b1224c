package launcherapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFollower(t *testing.T) {
	var events, bad []string
	f := NewFollower(func(ev Event) { events = append(events, ev.Event) }, func(line []byte, err error) { bad = append(bad, string(line)) })
	for _, line := range []string{`{"version":1,"event":"Scheduled"}`, "", "  ", "not json", `{"version":1,"phase":"Running"}`, ` {"version":1,"event":"Running"} `} {
		f.Line([]byte(line))
	}
	if strings.Join(events, ",") != "Scheduled,Running" || strings.Join(bad, "|") != `not json|{"version":1,"phase":"Running"}` {
		t.Fatalf("events %v, bad %v", events, bad)
	}
	NewFollower(func(Event) {}, nil).Line([]byte("not json")) // no bad-line function: skipped
	f.Line([]byte(`{"event":"Scheduled"}`))                   // no version: not this reader's
	if len(events) != 2 || len(bad) != 3 {
		t.Errorf("an unversioned line: events %v, bad %v", events, bad)
	}
}

func TestReadEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte(`{"version":1,"event":"Scheduled"}`+"\nx\n"+`{"version":1,"event":"Failed"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadEvents(path)
	if err != nil || len(evs) != 2 || evs[1].Event != EventFailed {
		t.Fatalf("ReadEvents = %+v, %v", evs, err)
	}
	if _, err := ReadEvents(path + ".missing"); err == nil {
		t.Error("ReadEvents of a missing file succeeded")
	}
}
