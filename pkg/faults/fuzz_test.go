package faults

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary annotation values and --fault strings to Parse.
// It must never panic; a rejected term must be a *Error; an accepted term
// must render to a canonical string that parses back to the same Spec.
func FuzzParse(f *testing.F) {
	seeds := []struct{ name, value, flag string }{
		{"qemu-kill", "30%2*signal=SIGTERM,after=5s,attempts=1-3", "qemu-kill=50%signal=kill"},
		{"qemu-hang", "", "qemu-hang=2*"},
		{"guest-panic", "after=3s,attempts=1,3,5,delay=2s", "guest-poweroff=after=10s"},
		{"disk-io-error", "disk=rootdisk,op=write,errno=ENOSPC", "disk-io-error=errno=22,op=all"},
		{"launcher-crash", "at=after-running", "launcher-crash=12.5%at=before-define"},
		{"libvirt-error", "0%at=define", "libvirt-error"},
		{"qemu-slow-start", "after=1m30s", "qemu-slow-start=after=0.5s,delay=1ms"},
		{"launcher-socket-unresponsive", "after=10s,for=1m", "launcher-socket-unresponsive=2*for=45s"},
		{"qemu-kil", "150%", "nope"},
		{"qemu-kill", "2*30%", "qemu-kill=signal"},
		{"qemu-hang", "attempts=3-1,4-", "qemu-hang=attempts=2,4-5,9"},
		{"guest-noready", " 1.0% 3* delay = 2s ", "guest-noready=delay=24h"},
		{"qemu-bad-config", "attempts=1,,3", "qemu-bad-config=,"},
		{"", "=", "="},
	}
	for _, s := range seeds {
		f.Add(s.name, s.value, s.flag)
	}
	f.Fuzz(func(t *testing.T, name, value, flag string) {
		checkRoundTrip(t, map[string]string{AnnotationPrefix + name: value}, nil)
		checkRoundTrip(t, nil, []string{flag})
		checkRoundTrip(t, map[string]string{AnnotationPrefix + name: value}, []string{flag})
	})
}

func checkRoundTrip(t *testing.T, annotations map[string]string, flags []string) {
	plan, err := Parse(annotations, flags)
	if err != nil {
		var fe *Error
		if !errors.As(err, &fe) || err.Error() == "" {
			t.Fatalf("Parse(%q, %q) error %v is not a *faults.Error", annotations, flags, err)
		}
		return
	}
	specs := plan.specs()
	for name, back := range map[string]func() (Plan, error){
		"flags":       func() (Plan, error) { return Parse(nil, plan.Flags()) },
		"annotations": func() (Plan, error) { return Parse(plan.Annotations(), nil) },
		"JSON": func() (Plan, error) {
			data, err := json.Marshal(plan)
			if err != nil {
				return Plan{}, err
			}
			var back Plan
			err = json.Unmarshal(data, &back)
			if err == nil && !reflect.DeepEqual(back.entries, plan.entries) {
				t.Fatalf("Parse(%q, %q): the JSON round trip changed the sources or order", annotations, flags)
			}
			return back, err
		},
	} {
		again, err := back()
		if err != nil {
			t.Fatalf("Parse(%q, %q) = %s, but its canonical %s do not parse: %v", annotations, flags, plan, name, err)
		}
		if !reflect.DeepEqual(again.specs(), specs) {
			t.Fatalf("Parse(%q, %q): %s round trip changed\n%#v\nto\n%#v", annotations, flags, name, specs, again.specs())
		}
	}
	for a := 1; a <= 3; a++ {
		_ = plan.Decide(DecideInput{Seed: 1, Key: "ns/vm", Attempt: a}).String()
	}
}
