package launchplan

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzReadPlan(f *testing.F) {
	f.Add([]byte(`{"args":{"Manifest":"-","Attempt":1},"faults":[{"term":"qemu-kill","source":"--fault"}],"input":"stdin","vmi":{"name":"v","namespace":"n","uid":"u"},"domainXML":"<domain/>","scratch":"/s","consoleLog":"/c","libvirtLog":"/l","accel":"tcg","accelReason":"r","reaper":{"pid":2,"fd":5}}`))
	f.Add([]byte(`{"args":null,"faults":null}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Read[RunPlan](bytes.NewReader(data))
		if err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Read[RunPlan](bytes.NewReader(again)); err != nil {
			t.Fatalf("a re-encoded plan does not read: %v", err)
		}
	})
}
