package faults

import (
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// TestErrorsQuoteInputCut: a bad fault term of a megabyte, in any part
// of it (fault name, parameter name, parameter value, probability,
// count), gives a message of a few hundred bytes that still names the
// source and quotes the start of the bad part.
func TestErrorsQuoteInputCut(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name        string
		annotations map[string]string
		flags       []string
		want        string
	}{
		{"value of an annotation", map[string]string{AnnotationPrefix + "qemu-kill": "signal=" + huge}, nil, `"signal=xxxx`},
		{"parameter name", map[string]string{AnnotationPrefix + "qemu-kill": huge + "=1"}, nil, `"xxxx`},
		{"probability", map[string]string{AnnotationPrefix + "qemu-kill": huge + "%"}, nil, `"xxxx`},
		{"count", map[string]string{AnnotationPrefix + "qemu-kill": huge + "*"}, nil, `"xxxx`},
		{"fault name in an annotation key", map[string]string{AnnotationPrefix + huge: "1"}, nil, `annotation "faults.crashloop.dev/xxxx`},
		{"a --fault flag", nil, []string{"qemu-kill=signal=" + huge}, `--fault "qemu-kill=signal=xxxx`},
		{"a --fault flag given twice", nil, []string{"qemu-kill=signal=" + huge, "qemu-kill=signal=" + huge}, `fault given twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.annotations, c.flags)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			for _, line := range strings.Split(msg, "\n") {
				if len(line) > 1200 {
					t.Errorf("a message line is %d bytes (starts %.300q); want the input cut to about 200 bytes per quote", len(line), line)
				}
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("message %.500q does not contain %q", msg, c.want)
			}
		})
	}
}

// TestQuoteCut: short values are quoted whole; long ones are cut on a
// rune boundary and say how long they were.
func TestQuoteCut(t *testing.T) {
	if got := launcherapi.Quote("SIGFOO"); got != `"SIGFOO"` {
		t.Errorf("launcherapi.Quote(SIGFOO) = %s", got)
	}
	long := strings.Repeat("é", 300) // 600 bytes
	got := launcherapi.Quote(long)
	if !strings.HasSuffix(got, "… (600 bytes)") || len(got) > 260 || strings.Contains(got, `\x`) {
		t.Errorf("launcherapi.Quote(600 bytes) = %s", got)
	}
}
