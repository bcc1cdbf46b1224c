package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/backoff"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// recordVersion is the version of the on-disk Record format.
const recordVersion = 1

// Record is everything the controller knows about one VM, persisted as one
// JSON file that is replaced atomically on every change, so a controller
// killed with SIGKILL and started again resumes exactly where it was.
type Record struct {
	// Version is the format version (recordVersion).
	Version int `json:"version"`
	// VM is the VirtualMachine with its status, in KubeVirt's JSON shape.
	VM *v1.VirtualMachine `json:"vm"`
	// Template is the VM's template with its instancetype and preference
	// applied (Manifest.Template), what its VMIs are made from, kept as
	// KubeVirt keeps a VM's controller revisions; nil when the VM names
	// neither.
	Template *v1.VirtualMachineInstanceTemplateSpec `json:"expandedTemplate,omitempty"`
	// VMI is the current VMI, or the last one once it is final; nil before
	// the first start.
	VMI *v1.VirtualMachineInstance `json:"vmi,omitempty"`
	// Launcher is the live launcher process of VMI, if any.
	Launcher *LauncherRef `json:"launcher,omitempty"`
	// Attempt is the number of launches so far (the last one's --attempt).
	Attempt int `json:"attempt"`
	// RetryAfter is status.startFailure.retryAfterTimestamp at full
	// precision: metav1.Time keeps only whole seconds on disk, too coarse
	// for a compressed time scale.
	RetryAfter *time.Time `json:"retryAfter,omitempty"`
	// Delay and ScaledDelay are the last planned backoff, unscaled and as
	// waited.
	Delay       time.Duration `json:"delayNs,omitempty"`
	ScaledDelay time.Duration `json:"scaledDelayNs,omitempty"`
	// History is the give-up rule's bookkeeping.
	History backoff.History `json:"history"`
	// ManifestDigest identifies the manifest content the spec came from, so
	// a restarted controller can tell an edited manifest from an unchanged one.
	ManifestDigest string `json:"manifestDigest"`
	// TimeScale is the --time-scale of the controller that saved the
	// record, so that a status read from disk can show it.
	TimeScale float64 `json:"timeScale,omitempty"`
	// RandDraws counts the values drawn from the VM's random source, so that
	// a restarted controller continues the same reproducible sequence.
	RandDraws uint64 `json:"randDraws"`
}

// Store keeps one Record file per VM in a state folder:
//
//	DIR/vms/NAMESPACE_NAME.json   the records
//	DIR/vms/.NAMESPACE_NAME.json.swap   the previous record, rewritten as the next (see Write)
//	DIR/launchers/NAMESPACE_NAME/ATTEMPT-UID/   one folder per launched VMI
//	DIR/control.sock              the running controller's socket
//	DIR/controller.lock           held (flock) by the running controller
type Store struct {
	dir   string
	fsync bool
	// locks serialize saves of one record (hashed by path): its spare
	// file is shared by every save.
	locks [64]sync.Mutex
}

// OpenStore opens (creating if needed) the state folder dir. fsync makes
// every save durable across a machine crash, not only a process kill.
func OpenStore(dir string, fsync bool) (*Store, error) {
	if dir == "" {
		return nil, errors.New("state folder: empty path")
	}
	for _, sub := range []string{"", "vms", "launchers"} {
		p := filepath.Join(dir, sub)
		// Owner-only: the records hold the VMs' specs.
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("state folder %s: %w", dir, err)
		}
	}
	if _, err := os.ReadDir(filepath.Join(dir, "vms")); err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	if err := syscall.Access(filepath.Join(dir, "vms"), 2 /* W_OK */); err != nil {
		return nil, fmt.Errorf("state folder %s/vms: not writable: %w", dir, err)
	}
	return &Store{dir: dir, fsync: fsync}, nil
}

// OpenStoreReadOnly opens an existing state folder without creating or
// changing anything, for status queries.
func OpenStoreReadOnly(dir string) (*Store, error) {
	st, err := os.Stat(filepath.Join(dir, "vms"))
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("state folder %s: vms is not a folder", dir)
	}
	return &Store{dir: dir}, nil
}

// Dir is the state folder.
func (s *Store) Dir() string { return s.dir }

// SocketPath is where the running controller listens.
func (s *Store) SocketPath() string { return filepath.Join(s.dir, "control.sock") }

func (s *Store) lockPath() string { return filepath.Join(s.dir, "controller.lock") }

func (s *Store) recordPath(k Key) string {
	return filepath.Join(s.dir, "vms", k.fileName()+".json")
}

// LauncherDir is the folder for one launched VMI of k.
func (s *Store) LauncherDir(k Key, attempt int, uid string) launcherapi.Dir {
	return LauncherDir(s.dir, k, attempt, uid)
}

// LauncherDir is the launch folder of one VMI of k in the state folder
// stateDir.
func LauncherDir(stateDir string, k Key, attempt int, uid string) launcherapi.Dir {
	return launcherapi.Dir(filepath.Join(stateDir, "launchers", k.fileName(), fmt.Sprintf("%d-%s", attempt, uid)))
}

// Load reads k's record; it returns (nil, nil) when there is none.
func (s *Store) Load(k Key) (*Record, error) {
	data, err := os.ReadFile(s.recordPath(k))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state of VM %s: %w", k, err)
	}
	rec, err := ParseRecord(data)
	if err != nil {
		return nil, fmt.Errorf("state of VM %s in %s: %w (move the file away to start this VM afresh)", k, s.recordPath(k), err)
	}
	if got := KeyOf(rec.VM); got != k {
		return nil, fmt.Errorf("state file %s holds VM %s, want %s", s.recordPath(k), got, k)
	}
	return rec, nil
}

// ParseRecord decodes and checks one record file.
func ParseRecord(data []byte) (*Record, error) {
	rec := &Record{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("not a virt-controller state record: %w", err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("state record version %d, this virt-controller reads version %d", rec.Version, recordVersion)
	}
	if rec.VM == nil || rec.VM.Name == "" || rec.VM.Namespace == "" {
		return nil, errors.New("state record has no VM with a name and namespace")
	}
	if rec.Attempt < 0 {
		return nil, fmt.Errorf("state record has a negative attempt %d", rec.Attempt)
	}
	if rec.Launcher != nil && rec.Launcher.PID <= 0 {
		return nil, fmt.Errorf("state record has launcher PID %d", rec.Launcher.PID)
	}
	// metav1.Time lost the sub-second part on disk; put the exact time back.
	if sf := rec.VM.Status.StartFailure; sf != nil && rec.RetryAfter != nil {
		t := metav1.NewTime(*rec.RetryAfter)
		sf.RetryAfterTimestamp = &t
	}
	return rec, nil
}

// Encode renders rec as its file content, copying the exact retry time
// next to the second-precision one in the status.
func (s *Store) Encode(rec *Record) ([]byte, error) {
	rec.Version = recordVersion
	if sf := rec.VM.Status.StartFailure; sf != nil && sf.RetryAfterTimestamp != nil {
		t := sf.RetryAfterTimestamp.Time
		rec.RetryAfter = &t
	} else {
		rec.RetryAfter = nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding state of VM %s: %w", KeyOf(rec.VM), err)
	}
	return append(data, '\n'), nil
}

// Write replaces k's record file with data atomically: write the spare
// file beside it (.NAME.json.swap), optionally fsync it, exchange the two
// names in one renameat2(RENAME_EXCHANGE), optionally fsync the folder. A
// reader (or a controller started after a SIGKILL) sees the old file or
// the new one, never a mix.
//
// The spare file then holds the previous record and is overwritten in
// place next time, so saving allocates and frees no inode. A fresh
// temporary file per save (the usual create and rename) made every save
// free one inode and allocate another; ext4 without a journal skips inodes
// freed in the last minute when it allocates, so with a thousand VMs
// saving twice per crash the controller spent most of its CPU scanning
// inode tables, and its timers fired late. A filesystem that cannot
// exchange names gets a plain rename.
func (s *Store) Write(k Key, data []byte) error {
	return s.writeAtomic(s.recordPath(k), data)
}

func (s *Store) writeAtomic(path string, data []byte) error {
	swap := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swap")
	mu := &s.locks[fnv32(path)%uint32(len(s.locks))]
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(swap, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if err == nil && s.fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, swap, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
		if err != nil {
			// ENOENT: the first save; EINVAL: no exchange on this filesystem.
			err = os.Rename(swap, path)
		}
	}
	if err != nil {
		_ = os.Remove(swap)
		return fmt.Errorf("saving %s: %w", path, err)
	}
	if s.fsync {
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	}
	return nil
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// List returns the keys of all records, sorted.
func (s *Store) List() ([]Key, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "vms"))
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", s.dir, err)
	}
	var keys []Key
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		ns, n, ok := strings.Cut(name, "_")
		if !ok {
			continue
		}
		keys = append(keys, Key{Namespace: ns, Name: n})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys, nil
}

// Lock takes the state folder for one running controller. It fails with a
// message naming the holder when another controller has it. The returned
// function releases it.
func (s *Store) Lock() (func(), error) {
	f, err := os.OpenFile(s.lockPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", s.dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(s.lockPath())
		_ = f.Close()
		return nil, fmt.Errorf("state folder %s is in use by another virt-controller (%s): %w", s.dir, strings.TrimSpace(string(holder)), err)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "pid %d\n", os.Getpid())
	return func() { _ = f.Close() }, nil
}
