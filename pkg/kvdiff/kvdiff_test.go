package kvdiff

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
	"github.com/crashloop-harness/crashloop/pkg/xmltree"
)

var update = flag.Bool("update", false, "rewrite testdata/differences.txt from this run")

// inputs are the manifests the differential renders: KubeVirt v1.6.0's
// examples (copies, see testdata/kubevirt-v1.6.0/ORIGIN), ours and the
// functional suites'.
func inputs(t *testing.T) []string {
	var files []string
	for _, g := range []string{"testdata/kubevirt-v1.6.0/*.yaml", "../../examples/*.yaml", "../../functests/*/testdata/*.yaml"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// hookObjects holds ours: the ConfigMap KubeVirt's hook sidecar examples
// name but do not carry.
const hookObjects = "testdata/objects"

// kvResult is one line of kvrender's output.
type kvResult struct {
	File, Name, Domain, Error string
	Index                     int
}

// TestDifferential renders every input with KubeVirt's converter and ours
// and compares the differences that remain after Rules with the table.
func TestDifferential(t *testing.T) {
	bin := os.Getenv("KVRENDER")
	if bin == "" {
		t.Skip("KVRENDER is not set: `make unit` builds tools/kvrender and sets it")
	}
	files := inputs(t)
	hooks := os.Getenv("VIRT_LAUNCHER_HOOKS")
	if hooks == "" {
		t.Fatal("KVRENDER is set but VIRT_LAUNCHER_HOOKS is not: `make unit` builds kubevirtmode's virt-launcher-hooks (and KubeVirt's sidecar programs beside it) and sets it")
	}
	cmd := exec.Command(bin, append([]string{"--objects", "testdata/kubevirt-v1.6.0", "--objects", hookObjects, "--sidecar-bin", filepath.Dir(hooks)}, files...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kvrender: %v\n%s", err, stderr.String())
	}
	expander := os.Getenv("VIRT_LAUNCHER_EXPAND")
	if expander == "" {
		t.Fatal("KVRENDER is set but VIRT_LAUNCHER_EXPAND is not: `make unit` builds kubevirtmode's virt-launcher-expand and sets it")
	}
	sb := Sandbox{Dir: t.TempDir(), Expand: vmexpandexec.Expander{Exe: expander, Dir: "testdata/kubevirt-v1.6.0"},
		Hooks: hooks, HookObjects: []string{"testdata/kubevirt-v1.6.0", hookObjects}}
	var table []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r kvResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(r.File)
		if err != nil {
			t.Fatal(err)
		}
		key := strings.TrimPrefix(strings.TrimPrefix(r.File, "testdata/"), "../../")
		table = append(table, entry(key, r, sb, data)...)
	}
	got := strings.Join(table, "\n") + "\n"
	const golden = "testdata/differences.txt"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the differences with KubeVirt's converter changed; if that is intended, run\n  KVRENDER=%s VIRT_LAUNCHER_EXPAND=%s VIRT_LAUNCHER_HOOKS=%s go test ./pkg/kvdiff -run TestDifferential -update\nand commit %s. Diff (- table, + now):\n%s", bin, expander, hooks, golden, lineDiff(string(want), got))
	}
}

// entry is one input's rows: whether each side renders it, and the
// differences left after the rules.
func entry(key string, r kvResult, sb Sandbox, data []byte) []string {
	head := fmt.Sprintf("== %s #%d", key, r.Index)
	ours, oerr := sb.Ours(context.Background(), data, r.File)
	switch {
	case r.Error != "" && oerr != nil:
		return []string{head, "  both refuse: KubeVirt: " + oneLine(r.Error), "    ours: " + oneLine(oerr.Error())}
	case r.Error != "":
		return []string{head, "  KubeVirt refuses, ours accepts: " + oneLine(r.Error)}
	case oerr != nil:
		return []string{head, "  ours refuses: " + oneLine(oerr.Error())}
	}
	kv, err := xmltree.Parse(r.Domain)
	if err != nil {
		return []string{head, "  KubeVirt's XML: " + err.Error()}
	}
	o, err := xmltree.Parse(ours)
	if err != nil {
		return []string{head, "  our XML: " + err.Error()}
	}
	Apply(kv, o)
	diffs := xmltree.Compare(kv, o)
	rows := []string{head, fmt.Sprintf("  both render; %d differences", len(diffs))}
	for _, d := range diffs {
		rows = append(rows, "  "+d.String())
	}
	return rows
}

// oneLine keeps a message to one line of at most 300 characters, so the
// table stays readable.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l := range ma {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
