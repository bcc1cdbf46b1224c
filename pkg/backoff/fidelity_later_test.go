package backoff

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestFidelityMarkdownLaterColumn(t *testing.T) {
	md := FidelityMarkdown([]FidelityRule{
		{ID: "X1", Rule: "r", Upstream: "s", Ours: "s", Later: []ReleaseResult{{Release: "v1.7.0", Result: LaterSame}, {Release: "v1.8.0", Result: "a | b"}}},
		{ID: "X2", Rule: "c", Upstream: "u", Ours: "o", Deviation: "named"},
	})
	want := "| Rule | Situation | KubeVirt v1.6.0 | Ours | Verdict | Later releases |\n" +
		"|---|---|---|---|---|---|\n" +
		"| X1 | r | s | s | same | v1.7.0: same; v1.8.0: a \\| b |\n" +
		"| X2 | c | u | o | named |  |\n"
	if md != want {
		t.Fatalf("FidelityMarkdown =\n%s\nwant\n%s", md, want)
	}
}

// TestLaterResults checks that every later result names a rule of the
// list and a release after v1.6.0, oldest first, with a result.
func TestLaterResults(t *testing.T) {
	ids := map[string]bool{}
	for _, r := range FidelityRules() {
		ids[r.ID] = true
	}
	release := regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)$`)
	key := func(v string) [3]int {
		m := release.FindStringSubmatch(v)
		var k [3]int
		for i := range k {
			k[i], _ = strconv.Atoi(m[i+1])
		}
		return k
	}
	later := func(a, b [3]int) bool {
		for i := range a {
			if a[i] != b[i] {
				return a[i] > b[i]
			}
		}
		return false
	}
	for id, results := range laterResults() {
		if !ids[id] {
			t.Errorf("later results for rule %s, which FidelityRules does not list", id)
		}
		prev := key("v1.6.0")
		for _, r := range results {
			if !release.MatchString(r.Release) {
				t.Errorf("rule %s: release %q is not vMAJOR.MINOR.PATCH", id, r.Release)
				continue
			}
			if !later(key(r.Release), prev) {
				t.Errorf("rule %s: release %s is not after v1.6.0 and the one before it", id, r.Release)
			}
			prev = key(r.Release)
			if strings.TrimSpace(r.Result) == "" {
				t.Errorf("rule %s, %s: empty result", id, r.Release)
			}
		}
	}
	for _, r := range FidelityRules() {
		if len(r.Later) != len(laterResults()[r.ID]) {
			t.Errorf("rule %s: Later has %d results, laterResults %d", r.ID, len(r.Later), len(laterResults()[r.ID]))
		}
	}
}
