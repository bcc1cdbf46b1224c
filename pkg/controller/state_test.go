package controller

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

func TestStoreKeepsExactRetryTime(t *testing.T) {
	s, err := OpenStore(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	retry := time.Date(2025, 1, 2, 3, 4, 5, 678901234, time.UTC)
	mt := metav1.NewTime(retry)
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}
	vm.Status.StartFailure = &v1.VirtualMachineStartFailure{ConsecutiveFailCount: 3, LastFailedVMIUID: "u", RetryAfterTimestamp: &mt}
	if err := saveRecord(s, &Record{VM: vm, Attempt: 3}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Load(Key{"default", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.VM.Status.StartFailure.RetryAfterTimestamp.Time; !got.Equal(retry) {
		t.Fatalf("retry time %s after a round trip, want %s", got, retry)
	}
	// The status keeps KubeVirt's shape (whole seconds) on disk.
	data, _ := os.ReadFile(filepath.Join(s.Dir(), "vms", "default_a.json"))
	if !strings.Contains(string(data), `"retryAfterTimestamp":"2025-01-02T03:04:05Z"`) {
		t.Errorf("status not in KubeVirt's shape:\n%s", data)
	}
	if keys, _ := s.List(); len(keys) != 1 || keys[0] != (Key{"default", "a"}) {
		t.Errorf("List = %v", keys)
	}
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), "vms"))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestParseRecordRejects(t *testing.T) {
	cases := map[string]string{
		"not JSON":      "{",
		"wrong version": `{"version":2,"vm":{"metadata":{"name":"a","namespace":"b"}}}`,
		"no VM":         `{"version":1}`,
		"negative":      `{"version":1,"attempt":-1,"vm":{"metadata":{"name":"a","namespace":"b"}}}`,
		"bad launcher":  `{"version":1,"launcher":{"pid":0},"vm":{"metadata":{"name":"a","namespace":"b"}}}`,
		"wrong type":    `{"version":1,"vm":{"metadata":{"name":7}}}`,
		"unnamed VM":    `{"version":1,"vm":{"metadata":{"namespace":"b"}}}`,
	}
	for name, data := range cases {
		if _, err := ParseRecord([]byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	good, _ := json.Marshal(&Record{Version: 1, VM: &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "b"}}, Attempt: 2})
	f.Add(good)
	f.Add([]byte(`{"version":1,"retryAfter":"2025-01-01T00:00:00.5Z","vm":{"metadata":{"name":"a","namespace":"b"},"status":{"startFailure":{"consecutiveFailCount":2}}}}`))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := ParseRecord(data)
		if err != nil {
			return
		}
		if rec.VM == nil || rec.VM.Name == "" || rec.Attempt < 0 {
			t.Fatalf("accepted an invalid record: %+v", rec)
		}
		// What was accepted must save and load again.
		s := &Store{dir: t.TempDir()}
		if err := os.MkdirAll(filepath.Join(s.dir, "vms"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Encode(rec); err != nil {
			t.Fatalf("accepted record does not encode: %v", err)
		}
	})
}

// TestStoreSavesInPlace checks that saves after the first exchange the
// record with its spare file: the newest content is read back whatever its
// length, and no inode is allocated (see Store.Write for why).
func TestStoreSavesInPlace(t *testing.T) {
	s, err := OpenStore(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	inodes := func() map[uint64]bool {
		out := map[uint64]bool{}
		entries, _ := os.ReadDir(filepath.Join(s.Dir(), "vms"))
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				out[info.Sys().(*syscall.Stat_t).Ino] = true
			}
		}
		return out
	}
	var first map[uint64]bool
	for i, attempt := range []int{1, 123456789, 2, 3} {
		vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", Labels: map[string]string{"n": strings.Repeat("x", 10*(4-i))}}}
		if err := saveRecord(s, &Record{VM: vm, Attempt: attempt}); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Load(Key{"default", "a"})
		if err != nil || rec.Attempt != attempt {
			t.Fatalf("save %d: read back attempt %v, %v; want %d", i, rec, err, attempt)
		}
		if i == 1 {
			first = inodes()
		}
		if i >= 1 && !maps.Equal(inodes(), first) {
			t.Errorf("save %d: inodes %v, want the same two as after the second save %v", i, inodes(), first)
		}
	}
	if len(first) != 2 {
		t.Errorf("files in vms/: %d inodes, want the record and its spare", len(first))
	}
	if keys, _ := s.List(); len(keys) != 1 {
		t.Errorf("List = %v, the spare file must not count", keys)
	}
}

// saveRecord saves rec as the worker does: Encode, then Write.
func saveRecord(s *Store, rec *Record) error {
	data, err := s.Encode(rec)
	if err != nil {
		return err
	}
	return s.Write(KeyOf(rec.VM), data)
}
