package launcherapi

import (
	"encoding/json"
	"testing"
)

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"version":1,"time":"2025-01-01T00:00:00.123Z","event":"Failed","vmi":"a","namespace":"b","uid":"u","phase":"Failed","reason":"QemuStartTimeout","exitCode":10}`))
	f.Add([]byte(`{"version":1,"event":"Running"}`))
	f.Add([]byte(`panic: oops`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := ParseEvent(line)
		if err != nil {
			return
		}
		if ev.Event == "" {
			t.Fatal("accepted an event without a name")
		}
		again, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseEvent(again); err != nil {
			t.Fatalf("re-encoded event does not parse: %v", err)
		}
	})
}
