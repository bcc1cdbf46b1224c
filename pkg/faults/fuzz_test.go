package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary annotation values and --fault strings to Parse.
// It must never panic; a rejected term must be a *Error whose message
// quotes at most maxQuotedInput bytes of the input in a row and stays under
// maxErrorMessage bytes however long the input; an accepted term must
// render to a canonical string that parses back to the same Spec.
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
		// A byte short of quoting too much: one more byte of the name
		// (an unknown fault) makes a message that quotes 401 bytes.
		{strings.Repeat("x", maxQuotedInput), "", "qemu-kill=signal=" + strings.Repeat("y", maxQuotedInput-len("qemu-kill=signal="))},
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
		var inputs []string
		for k, v := range annotations {
			inputs = append(inputs, strings.TrimPrefix(k, AnnotationPrefix), v)
		}
		if problems := quotedTooMuch(err, append(inputs, flags...)); len(problems) > 0 {
			t.Fatalf("Parse of %d bytes of input: %s", len(strings.Join(inputs, "")+strings.Join(flags, "")), strings.Join(problems, "; "))
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

// How much of its input a parse error may carry: at most maxQuotedInput
// bytes of any one input in a row (a quoted part is cut to about 200
// bytes, a detail that quotes one after a few words to about 400), and at
// most maxErrorMessage bytes per *Error in all (a message lists allowed
// values besides its quotes).
const (
	maxQuotedInput  = 400
	maxErrorMessage = 4096
)

// quotedTooMuch checks every *Error in err's tree against maxQuotedInput
// and maxErrorMessage, and says what each one broke.
func quotedTooMuch(err error, inputs []string) []string {
	var problems []string
	for _, fe := range faultErrors(err) {
		msg := fe.Error()
		if len(msg) > maxErrorMessage {
			problems = append(problems, fmt.Sprintf("a message of %d bytes: %.120s…", len(msg), msg))
			continue
		}
		for _, in := range inputs {
			if n := longestRun(msg, in, maxQuotedInput+1); n > maxQuotedInput {
				problems = append(problems, fmt.Sprintf("a message quoting more than %d bytes of an input of %d: %.120s…", maxQuotedInput, len(in), msg))
			}
		}
	}
	return problems
}

// faultErrors are the *Error values of a tree of joined errors.
func faultErrors(err error) []*Error {
	if fe, ok := err.(*Error); ok {
		return []*Error{fe}
	}
	var out []*Error
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, faultErrors(e)...)
		}
	case interface{ Unwrap() error }:
		out = faultErrors(u.Unwrap())
	}
	return out
}

// longestRun tells whether msg holds a run of window bytes of in: it
// returns window if it does, else 0. Every window-byte substring of msg is
// a map key, so the check is linear in both lengths.
func longestRun(msg, in string, window int) int {
	if len(in) < window || len(msg) < window {
		return 0
	}
	seen := make(map[string]bool, len(msg)-window+1)
	for i := 0; i+window <= len(msg); i++ {
		seen[msg[i:i+window]] = true
	}
	for i := 0; i+window <= len(in); i++ {
		if seen[in[i:i+window]] {
			return window
		}
	}
	return 0
}

// TestHostileFaultInputs runs the minimized inputs of the echo class
// through FuzzParse's message property, which each must keep; before
// errors cut what they quote, every message quoted its input whole.
func TestHostileFaultInputs(t *testing.T) {
	for _, c := range []struct {
		name        string
		annotations map[string]string
		flags       []string
	}{
		{name: "unknown fault named by 401 bytes", annotations: map[string]string{AnnotationPrefix + strings.Repeat("x", 401): ""}},
		{name: "a megabyte of bad signal", annotations: map[string]string{AnnotationPrefix + "qemu-kill": "signal=" + strings.Repeat("y", 1<<20)}},
		{name: "a megabyte of --fault", flags: []string{strings.Repeat("z", 1<<20)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.annotations, c.flags)
			if err == nil {
				t.Fatalf("accepted")
			}
			var inputs []string
			for k, v := range c.annotations {
				inputs = append(inputs, strings.TrimPrefix(k, AnnotationPrefix), v)
			}
			problems := quotedTooMuch(err, append(inputs, c.flags...))
			if len(problems) > 0 {
				t.Errorf("broken properties:\n- %s", strings.Join(problems, "\n- "))
			}
		})
	}
}
