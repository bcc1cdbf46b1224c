package launcherapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFollowerCutsLinesAcrossWrites(t *testing.T) {
	var events []string
	var bad []string
	f := NewFollower(func(ev Event) { events = append(events, ev.Event) }, func(line []byte, err error) { bad = append(bad, string(line)) })
	stream := `{"event":"Scheduled"}` + "\n\n  \nnot json\n" + `{"event":"Running"}` + "\n" + `{"event":"Succeeded"}`
	// Byte by byte: a line split over writes is still one line.
	for i := range len(stream) {
		if n, err := f.Write([]byte{stream[i]}); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if strings.Join(events, ",") != "Scheduled,Running" || strings.Join(bad, ",") != "not json" {
		t.Fatalf("before Flush: events %v, bad %v", events, bad)
	}
	f.Flush()
	f.Flush()
	if strings.Join(events, ",") != "Scheduled,Running,Succeeded" {
		t.Errorf("after Flush: events %v", events)
	}
}

func TestReadEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte(`{"event":"Scheduled"}`+"\nx\n"+`{"event":"Failed"}`), 0o600); err != nil {
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
