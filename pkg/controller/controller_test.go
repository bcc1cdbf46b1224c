package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/vmexpandexec"
)

const failFast = v1.FuncTestLauncherFailFastAnnotation

func TestCrashLoopFollowsBackoff(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state), path)
	s := h.failures("crashy", 4)
	if s.VM.Status.PrintableStatus != v1.VirtualMachineStatusCrashLoopBackOff {
		t.Errorf("printable status %s during the loop, want CrashLoopBackOff", s.VM.Status.PrintableStatus)
	}
	plans, starts := h.eventsOf("crashy", EventBackoffPlanned), h.eventsOf("crashy", EventStarted)
	if len(plans) != 4 || len(starts) != 4 {
		t.Fatalf("%d BackoffPlanned, %d Started events; want 4 each", len(plans), len(starts))
	}
	for i, p := range plans[:3] {
		next := starts[i+1]
		if next.PlannedAt == nil || !next.PlannedAt.Equal(*p.RetryAfter) {
			t.Errorf("start %d planned at %v, backoff said %v", i+2, next.PlannedAt, p.RetryAfter)
		}
		// On the fake clock the retry happens exactly at the planned time.
		if gap, want := next.Time.Sub(p.Time), time.Duration(p.ScaledDelayNs); gap != want || *next.LatenessNs != 0 {
			t.Errorf("failure %d: gap to next start %s (late %dns), want %s", i+1, gap, *next.LatenessNs, want)
		}
		if p.FailCount != i+1 {
			t.Errorf("BackoffPlanned %d has failCount %d", i+1, p.FailCount)
		}
		if p.Seed != 42 || p.TimeScale != 1 {
			t.Errorf("event lacks seed/scale: %+v", p)
		}
	}
	ex := h.eventsOf("crashy", EventExited)[0]
	if ex.ExitCode == nil || *ex.ExitCode != 2 || ex.Reason != "LauncherCrashed" {
		t.Errorf("first exit: code %v reason %q, want 2 LauncherCrashed", ex.ExitCode, ex.Reason)
	}
	if !strings.Contains(ex.Message, "exit code 2") {
		t.Errorf("first exit message %q, want the exit code", ex.Message)
	}
}

func TestStopEndsCrashLoopAndClearsRecord(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state), path)
	h.failures("crashy", 2)
	snap, msg, err := h.c.Do(context.Background(), "stop", Key{"default", "crashy"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.VM.Status.StartFailure != nil || snap.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped || snap.RetryAfter != nil {
		t.Fatalf("after stop (%s): %s, startFailure %+v", msg, describe(snap), snap.VM.Status.StartFailure)
	}
	if s, _ := snap.VM.RunStrategy(); s != v1.RunStrategyHalted {
		t.Errorf("runStrategy after stop = %s, want Halted", s)
	}
	// An hour later nothing has started: stopping again is refused,
	// since nothing is running.
	h.clk.Step(time.Hour)
	if _, _, err := h.c.Do(context.Background(), "stop", Key{"default", "crashy"}); err == nil {
		t.Error("second stop succeeded")
	}
	if s := h.snapshot("crashy"); s.Attempt != snap.Attempt {
		t.Fatalf("launched again after stop: attempt %d -> %d", snap.Attempt, s.Attempt)
	}
	if _, _, err := h.c.Do(context.Background(), "stop", Key{"default", "nope"}); !IsNotFound(err) {
		t.Errorf("stop of an unknown VM: %v, want not found", err)
	}
	// The persisted record says the same.
	rec, err := (&Store{dir: state}).Load(Key{"default", "crashy"})
	if err != nil || rec.VM.Status.StartFailure != nil || rec.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
		t.Fatalf("persisted after stop: %v %+v", err, rec.VM.Status)
	}
}

// edit rewrites a manifest file and moves the clock past the controller's
// next look at it. A comment line makes each edit's size differ from the
// last: the controller looks for a new size or modification time, and
// two writes within one tick of the kernel's file clock share the time.
func (h *harness) edit(path, content string) {
	h.t.Helper()
	changes := len(h.eventsOf("", EventManifestChanged))
	// Replaced whole (as editors save), so that the controller never reads
	// half a file on its one look.
	tmp := writeFile(h.t, path+".tmp", content+"#"+strings.Repeat(" ", changes)+"\n")
	if err := os.Rename(tmp, path); err != nil {
		h.t.Fatal(err)
	}
	h.clk.Step(20 * time.Millisecond) // testConfig's WatchInterval
	h.until("the edit of "+path, func() bool { return len(h.eventsOf("", EventManifestChanged)) > changes })
}

func TestRemovingTheAnnotationRecovers(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state), path)
	s := h.failures("crashy", 2)
	h.edit(path, vmYAML("crashy", "Always", nil))
	h.clk.SetTime(*s.RetryAfter)
	s = h.waitFor("crashy", "Running", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning
	})
	if s.VM.Status.StartFailure != nil {
		t.Errorf("startFailure not cleared on Running: %+v", s.VM.Status.StartFailure)
	}
	if n := len(h.eventsOf("crashy", EventManifestChanged)); n != 1 {
		t.Errorf("ManifestChanged events: %d", n)
	}
	if s.VM.Generation < 2 {
		t.Errorf("generation %d after an edit", s.VM.Generation)
	}
}

func TestEditingTemplateKeepsRecord(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state), path)
	h.failures("crashy", 2)
	h.edit(path, vmYAML("crashy", "Always", map[string]string{failFast: "", "edited": "yes"}))
	s := h.snapshot("crashy")
	if s.VM.Spec.Template.ObjectMeta.Annotations["edited"] != "yes" || failCountOf(s) != 2 {
		t.Fatalf("after the edit: %s, annotations %v; want the new template and the record kept", describe(s), s.VM.Spec.Template.ObjectMeta.Annotations)
	}
}

func TestRerunOnFailureDoesNotRestartSucceeded(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("job", "RerunOnFailure", map[string]string{fakeBehavior: "succeed-after=50ms"}))
	h := startHarness(t, testConfig(state), path)
	h.waitFor("job", "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	h.clk.Step(50 * time.Millisecond)
	s := h.waitFor("job", "Succeeded and gone", func(s *Snapshot) bool {
		return len(h.eventsOf("job", EventSucceeded)) > 0 && s.LauncherPID == 0 && s.VMI == nil
	})
	h.clk.Step(time.Hour)
	if s.Attempt != 1 || s.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped || s.RetryAfter != nil {
		t.Fatalf("after Succeeded: %s, want attempt 1 Stopped", describe(s))
	}
	if len(s.VM.Status.StateChangeRequests) != 0 {
		t.Fatalf("after Succeeded: requests %v; want the VMI deleted and no request, as upstream", s.VM.Status.StateChangeRequests)
	}
	if _, _, err := h.c.Do(context.Background(), "stop", Key{"default", "job"}); err != nil {
		t.Fatal(err)
	}
	if s := h.snapshot("job"); s.Attempt != 1 {
		t.Errorf("started again after Succeeded: %s", describe(s))
	}
}

func TestRerunOnFailureRestartsFailed(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("job", "RerunOnFailure", map[string]string{fakeBehavior: "fail-start"}))
	h := startHarness(t, testConfig(state), path)
	h.failures("job", 3)
	failed := h.eventsOf("job", EventFailed)
	if len(failed) != 3 || failed[0].Reason != "QemuStartTimeout" {
		t.Errorf("Failed events %+v, want the launcher's QemuStartTimeout", failed)
	}
}

func TestHaltedAndManualNeverStartByThemselves(t *testing.T) {
	state, mdir := tempDirs(t)
	halted := writeFile(t, filepath.Join(mdir, "halted.yaml"), vmYAML("halted", "Halted", nil))
	manual := writeFile(t, filepath.Join(mdir, "manual.yaml"), vmYAML("manual", "Manual", nil))
	noStrategy := writeFile(t, filepath.Join(mdir, "none.yaml"), vmYAML("none", "", nil))
	h := startHarness(t, testConfig(state), halted, manual, noStrategy)
	for _, n := range []string{"halted", "manual", "none"} {
		h.waitFor(n, "Stopped", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped })
	}
	h.clk.Step(time.Hour)
	// A manual start runs a Manual VM once, and its stop leaves it Manual.
	if _, _, err := h.c.Do(context.Background(), "start", Key{"default", "manual"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"halted", "none"} {
		if s := h.snapshot(n); s.Attempt != 0 || s.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
			t.Errorf("%s: %s, want never started and Stopped", n, describe(s))
		}
	}
	h.waitFor("manual", "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	if _, _, err := h.c.Do(context.Background(), "start", Key{"default", "manual"}); err == nil {
		t.Error("start of a running VM succeeded")
	}
	if _, _, err := h.c.Do(context.Background(), "stop", Key{"default", "manual"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("manual", "Stopped", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped })
	if st, _ := s.VM.RunStrategy(); st != v1.RunStrategyManual || s.Attempt != 1 {
		t.Errorf("after stop: strategy %s attempt %d", st, s.Attempt)
	}
	// start of a Halted VM makes it Always.
	if _, _, err := h.c.Do(context.Background(), "start", Key{"default", "halted"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitFor("halted", "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	if st, _ := s.VM.RunStrategy(); st != v1.RunStrategyAlways {
		t.Errorf("start of Halted gave strategy %s", st)
	}
}

func TestRestartReplacesTheVMIAndClearsRecord(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Always", nil))
	h := startHarness(t, testConfig(state), path)
	s := h.waitFor("vm", "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	first, pid := s.VMI.UID, s.LauncherPID
	if _, _, err := h.c.Do(context.Background(), "restart", Key{"default", "vm"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitFor("vm", "a new Running VMI", func(s *Snapshot) bool {
		return s.VMI.UID != first && s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning
	})
	if s.Attempt != 2 || s.VM.Status.StartFailure != nil {
		t.Errorf("after restart: %s", describe(s))
	}
	if l := h.rt.launcher(pid); l.running() || len(l.signals) == 0 || l.signals[0] != syscall.SIGTERM {
		t.Errorf("the first launcher: running %v, signals %v; want it ended by SIGTERM", l.running(), l.signals)
	}
}

func TestKilledControllerResumesBackoffAndAdoptsLaunchers(t *testing.T) {
	state, mdir := tempDirs(t)
	crashy := writeFile(t, filepath.Join(mdir, "crashy.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	steady := writeFile(t, filepath.Join(mdir, "steady.yaml"), vmYAML("steady", "Always", nil))
	cfg := testConfig(state)
	h := startHarness(t, cfg, crashy, steady)
	h.failures("crashy", 3)
	running := h.waitFor("steady", "Running", func(s *Snapshot) bool { return s.LauncherPID != 0 && s.VMI != nil && s.VMI.IsRunning() })
	h.stop() // StopOnExit is off: like a kill, nothing is stopped
	rec, err := (&Store{dir: state}).Load(Key{"default", "crashy"})
	if err != nil {
		t.Fatal(err)
	}
	retryAfter := *rec.RetryAfter
	if !h.rt.launcher(running.LauncherPID).running() {
		t.Fatal("launcher of steady was stopped with the controller")
	}

	h2 := startHarness(t, cfg, crashy, steady)
	adopted := h2.waitFor("steady", "adopted", func(s *Snapshot) bool { return len(h2.eventsOf("steady", EventAdopted)) == 1 })
	if adopted.Attempt != 1 || adopted.LauncherPID != running.LauncherPID || !strings.Contains(h2.eventsOf("steady", EventAdopted)[0].Message, "alive=true") {
		t.Errorf("steady after resume: %s, pid %d (was %d), %+v", describe(adopted), adopted.LauncherPID, running.LauncherPID, h2.eventsOf("steady", EventAdopted))
	}
	s := h2.failures("crashy", 4)
	starts := h2.eventsOf("crashy", EventStarted)
	if len(starts) != 1 || !starts[0].Time.Equal(retryAfter) || !starts[0].PlannedAt.Equal(retryAfter) {
		t.Fatalf("restarted controller's starts %+v, want one at the saved retry time %v", starts, retryAfter)
	}
	if s.Attempt != failCountOf(s) || s.Attempt != rec.Attempt+1 {
		t.Errorf("after resume: %s; saved attempt was %d", describe(s), rec.Attempt)
	}
	// Stopping the adopted VMI reaches its launcher.
	if _, _, err := h2.c.Do(context.Background(), "stop", Key{"default", "steady"}); err != nil {
		t.Fatal(err)
	}
	h2.waitFor("steady", "Stopped", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped })
	if h.rt.launcher(running.LauncherPID).running() {
		t.Error("adopted launcher still running after stop")
	}
}

// TestAdoptedLauncherGoneWhileAway: a launcher that ended while no
// controller ran is a crash with an unknown exit code, and (having run)
// its VM starts again at once.
func TestAdoptedLauncherGoneWhileAway(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Always", nil))
	cfg := testConfig(state)
	h := startHarness(t, cfg, path)
	running := h.waitFor("vm", "Running", func(s *Snapshot) bool { return s.VMI != nil && s.VMI.IsRunning() })
	h.stop()
	// As the node's OOM killer would, while the controller is away.
	h.rt.launcher(running.LauncherPID).end(launchrtKilled())
	h2 := startHarness(t, cfg, path)
	s := h2.waitFor("vm", "a new launcher", func(s *Snapshot) bool { return len(h2.eventsOf("vm", EventStarted)) == 1 })
	ex, adopted := h2.eventsOf("vm", EventExited), h2.eventsOf("vm", EventAdopted)
	if len(ex) != 1 || ex[0].ExitCode != nil || ex[0].Reason != "LauncherCrashed" || !strings.Contains(ex[0].Message, "while the controller was away") {
		t.Fatalf("exit %+v, want a LauncherCrashed with no exit code", ex)
	}
	if len(adopted) != 1 || !strings.Contains(adopted[0].Message, "alive=false") {
		t.Errorf("Adopted events %+v, want one saying the launcher is gone", adopted)
	}
	if s.Attempt != 2 || failCountOf(s) != 0 {
		t.Errorf("after the crash: %s, want attempt 2 and no failure counted (the VMI had run)", describe(s))
	}
}

func TestShutdownStopsVMIsWithoutCountingAFailure(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Always", nil))
	cfg := testConfig(state)
	cfg.StopOnExit = true
	h := startHarness(t, cfg, path)
	s := h.waitFor("vm", "Running", func(s *Snapshot) bool { return s.LauncherPID != 0 && s.VMI != nil && s.VMI.IsRunning() })
	h.stop()
	if h.rt.launcher(s.LauncherPID).running() {
		t.Errorf("launcher %d still running after shutdown", s.LauncherPID)
	}
	rec, err := (&Store{dir: state}).Load(Key{"default", "vm"})
	if err != nil || rec.VMI != nil || rec.Launcher != nil || rec.VM.Status.StartFailure != nil {
		t.Fatalf("after shutdown: err %v vmi %v launcher %v startFailure %v", err, rec.VMI != nil, rec.Launcher, rec.VM.Status.StartFailure)
	}
}

func TestCorruptStateIsRefusedAndKept(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Always", nil))
	if err := os.MkdirAll(filepath.Join(state, "vms"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := writeFile(t, filepath.Join(state, "vms", "default_vm.json"), `{"version":1,"vm":{"metadata":{"name":"vm"`)
	c, err := New(testConfig(state))
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := ReadManifests(context.Background(), vmexpandexec.Expander{}, []string{path})
	err = c.Run(context.Background(), ms)
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Run with a corrupt state file: %v, want an error naming %s", err, bad)
	}
	if got, _ := os.ReadFile(bad); string(got) != `{"version":1,"vm":{"metadata":{"name":"vm"` {
		t.Errorf("corrupt state file was changed to %q", got)
	}
}

func TestStateFolderErrors(t *testing.T) {
	d := t.TempDir()
	file := writeFile(t, filepath.Join(d, "file"), "x")
	if _, err := New(testConfig(file)); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("state folder that is a file: %v", err)
	}
	if _, err := New(testConfig(filepath.Join(file, "sub"))); err == nil {
		t.Error("state folder under a file accepted")
	}
	// Two controllers on one folder: the second is refused.
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Halted", nil))
	startHarness(t, testConfig(state), path)
	c2, err := New(testConfig(state))
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := ReadManifests(context.Background(), vmexpandexec.Expander{}, []string{path})
	if err := c2.Run(context.Background(), ms); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second controller on one folder: %v", err)
	}
}

// The stats request counts the launchers being watched, and once they
// are gone the goroutines and descriptors are back to where they were.
func TestStatsGiveBackAfterStop(t *testing.T) {
	dir := t.TempDir()
	m := writeFile(t, filepath.Join(dir, "vm.yaml"), vmYAML("runner", "Halted", nil))
	h := startHarness(t, testConfig(filepath.Join(dir, "state")), m)
	h.waitFor("runner", "Stopped", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped
	})
	stats := func() *ProcessStats {
		t.Helper()
		resp, err := Call(context.Background(), filepath.Join(dir, "state"), Request{Op: "stats"})
		if err != nil || !resp.OK || resp.Stats == nil {
			t.Fatalf("stats: %v %+v", err, resp)
		}
		return resp.Stats
	}
	before := stats()
	if before.VMs != 1 || before.LiveLaunchers != 0 || before.Goroutines <= 0 || before.OpenFDs <= 0 {
		t.Fatalf("stats of a halted VM: %+v", before)
	}
	h.edit(m, vmYAML("runner", "Always", nil))
	h.waitFor("runner", "Running", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning
	})
	if during := stats(); during.LiveLaunchers != 1 {
		t.Fatalf("stats with a running VM: %+v", during)
	}
	h.edit(m, vmYAML("runner", "Halted", nil))
	h.waitFor("runner", "Stopped", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped && s.LauncherPID == 0
	})
	// The launcher's watcher ends just after the worker saw the exit:
	// ask again until it has, or the deadline passes.
	deadline := time.Now().Add(settleWait)
	after := stats()
	for (after.Goroutines != before.Goroutines || after.OpenFDs != before.OpenFDs) && time.Now().Before(deadline) {
		<-time.After(10 * time.Millisecond)
		after = stats()
	}
	if after.Goroutines != before.Goroutines || after.OpenFDs != before.OpenFDs || after.LiveLaunchers != 0 {
		t.Fatalf("after the stop: %+v, before the run: %+v", after, before)
	}
}
