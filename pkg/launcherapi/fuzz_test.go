package launcherapi

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"time":"2025-01-01T00:00:00.123Z","event":"Failed","vmi":"a","namespace":"b","uid":"u","phase":"Failed","reason":"QemuStartTimeout","exitCode":10}`))
	f.Add([]byte(`{"event":"Running"}`))
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

func FuzzReadPlan(f *testing.F) {
	f.Add([]byte(`{"argv":["-"],"input":"stdin","vmi":{"name":"v","namespace":"n","uid":"u"},"domainXML":"<domain/>","scratch":"/s","consoleLog":"/c","libvirtLog":"/l","accel":"tcg","accelReason":"r","reaper":{"pid":2,"fd":5}}`))
	f.Add([]byte(`{"argv":null}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ReadPlan(bytes.NewReader(data))
		if err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPlan(bytes.NewReader(again)); err != nil {
			t.Fatalf("a re-encoded plan does not read: %v", err)
		}
	})
}
