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
)

const failFast = v1.FuncTestLauncherFailFastAnnotation

func TestCrashLoopFollowsScaledBackoff(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state, 0.002), path)
	s := h.waitFor("crashy", 10*time.Second, "4 failures", func(s *Snapshot) bool { return failCountOf(s) >= 4 })
	if s.VM.Status.PrintableStatus != v1.VirtualMachineStatusCrashLoopBackOff && s.VM.Status.PrintableStatus != v1.VirtualMachineStatusStarting {
		t.Errorf("printable status %s during the loop", s.VM.Status.PrintableStatus)
	}
	h.waitFor("crashy", 5*time.Second, "CrashLoopBackOff", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusCrashLoopBackOff
	})
	plans, starts := h.eventsOf("crashy", EventBackoffPlanned), h.eventsOf("crashy", EventStarted)
	if len(plans) < 3 || len(starts) < 4 {
		t.Fatalf("%d BackoffPlanned, %d Started events", len(plans), len(starts))
	}
	for i, p := range plans[:3] {
		next := starts[i+1]
		if next.PlannedAt == nil || !next.PlannedAt.Equal(*p.RetryAfter) {
			t.Errorf("start %d planned at %v, backoff said %v", i+2, next.PlannedAt, p.RetryAfter)
		}
		gap := next.Time.Sub(p.Time)
		want := time.Duration(p.ScaledDelayNs)
		if gap < want || gap > want+50*time.Millisecond {
			t.Errorf("failure %d: gap to next start %s, want %s (+50ms)", i+1, gap, want)
		}
		if p.FailCount != i+1 {
			t.Errorf("BackoffPlanned %d has failCount %d", i+1, p.FailCount)
		}
		if p.Seed != 42 || p.TimeScale != 0.002 {
			t.Errorf("event lacks seed/scale: %+v", p)
		}
	}
	ex := h.eventsOf("crashy", EventExited)[0]
	if ex.ExitCode == nil || *ex.ExitCode != 2 || ex.Reason != "LauncherCrashed" {
		t.Errorf("first exit: code %v reason %q, want 2 LauncherCrashed", ex.ExitCode, ex.Reason)
	}
}

func TestStopEndsCrashLoopAndClearsRecord(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	// Scale 0.01: the third retry waits 0.9-1.35 s, long enough to stop in.
	h := startHarness(t, testConfig(state, 0.01), path)
	h.waitFor("crashy", 10*time.Second, "2 failures", func(s *Snapshot) bool { return failCountOf(s) >= 2 })
	snap, msg, err := h.c.Do(context.Background(), "stop", Key{"default", "crashy"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.VM.Status.StartFailure != nil || snap.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
		t.Fatalf("after stop (%s): %s, startFailure %+v", msg, describe(snap), snap.VM.Status.StartFailure)
	}
	if s, _ := snap.VM.RunStrategy(); s != v1.RunStrategyHalted {
		t.Errorf("runStrategy after stop = %s, want Halted", s)
	}
	attempts := snap.Attempt
	time.Sleep(1500 * time.Millisecond)
	if s := h.snapshot("crashy"); s.Attempt != attempts {
		t.Fatalf("launched again after stop: attempt %d -> %d", attempts, s.Attempt)
	}
	// Stopping again is refused: nothing is running.
	if _, _, err := h.c.Do(context.Background(), "stop", Key{"default", "crashy"}); err == nil {
		t.Error("second stop succeeded")
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

func TestRemovingTheAnnotationRecovers(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state, 0.002), path)
	h.waitFor("crashy", 10*time.Second, "2 failures", func(s *Snapshot) bool { return failCountOf(s) >= 2 })
	writeFile(t, path, vmYAML("crashy", "Always", nil))
	s := h.waitFor("crashy", 10*time.Second, "Running", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning
	})
	if s.VM.Status.StartFailure != nil {
		t.Errorf("startFailure not cleared on Running: %+v", s.VM.Status.StartFailure)
	}
	if len(h.eventsOf("crashy", EventManifestChanged)) != 1 {
		t.Errorf("ManifestChanged events: %d", len(h.eventsOf("crashy", EventManifestChanged)))
	}
	if s.VM.Generation < 2 {
		t.Errorf("generation %d after an edit", s.VM.Generation)
	}
}

func TestEditingTemplateKeepsRecord(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	h := startHarness(t, testConfig(state, 0.01), path)
	h.waitFor("crashy", 10*time.Second, "2 failures", func(s *Snapshot) bool { return failCountOf(s) >= 2 })
	writeFile(t, path, vmYAML("crashy", "Always", map[string]string{failFast: "", "edited": "yes"}))
	s := h.waitFor("crashy", 5*time.Second, "the edit", func(s *Snapshot) bool {
		return s.VM.Spec.Template.ObjectMeta.Annotations["edited"] == "yes"
	})
	if failCountOf(s) < 2 {
		t.Fatalf("edit cleared the record: %s", describe(s))
	}
}

func TestRerunOnFailureDoesNotRestartSucceeded(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("job", "RerunOnFailure", map[string]string{fakeBehavior: "succeed-after=50ms"}))
	h := startHarness(t, testConfig(state, 0.01), path)
	h.waitFor("job", 10*time.Second, "Succeeded", func(*Snapshot) bool { return len(h.eventsOf("job", EventSucceeded)) > 0 })
	time.Sleep(500 * time.Millisecond)
	s := h.snapshot("job")
	if s.Attempt != 1 || s.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
		t.Fatalf("after Succeeded: %s, want attempt 1 Stopped", describe(s))
	}
	if s.VMI != nil || len(s.VM.Status.StateChangeRequests) != 0 {
		t.Fatalf("after Succeeded: VMI %v, requests %v; want the VMI deleted and no request, as upstream", s.VMI != nil, s.VM.Status.StateChangeRequests)
	}
}

func TestRerunOnFailureRestartsFailed(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("job", "RerunOnFailure", map[string]string{fakeBehavior: "fail-start"}))
	h := startHarness(t, testConfig(state, 0.002), path)
	h.waitFor("job", 10*time.Second, "3 failures", func(s *Snapshot) bool { return failCountOf(s) >= 3 })
	failed := h.eventsOf("job", EventFailed)
	if len(failed) == 0 || failed[0].Reason != "QemuStartTimeout" {
		t.Errorf("Failed events %+v, want the launcher's QemuStartTimeout", failed)
	}
}

func TestHaltedAndManualNeverStartByThemselves(t *testing.T) {
	state, mdir := tempDirs(t)
	halted := writeFile(t, filepath.Join(mdir, "halted.yaml"), vmYAML("halted", "Halted", nil))
	manual := writeFile(t, filepath.Join(mdir, "manual.yaml"), vmYAML("manual", "Manual", nil))
	noStrategy := writeFile(t, filepath.Join(mdir, "none.yaml"), vmYAML("none", "", nil))
	h := startHarness(t, testConfig(state, 0.01), halted, manual, noStrategy)
	time.Sleep(500 * time.Millisecond)
	for _, n := range []string{"halted", "manual", "none"} {
		if s := h.snapshot(n); s.Attempt != 0 || s.VM.Status.PrintableStatus != v1.VirtualMachineStatusStopped {
			t.Errorf("%s: %s, want never started and Stopped", n, describe(s))
		}
	}
	// A manual start runs a Manual VM once, and its stop leaves it Manual.
	if _, _, err := h.c.Do(context.Background(), "start", Key{"default", "manual"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("manual", 5*time.Second, "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	if _, _, err := h.c.Do(context.Background(), "start", Key{"default", "manual"}); err == nil {
		t.Error("start of a running VM succeeded")
	}
	if _, _, err := h.c.Do(context.Background(), "stop", Key{"default", "manual"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("manual", 5*time.Second, "Stopped", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped })
	if st, _ := s.VM.RunStrategy(); st != v1.RunStrategyManual || s.Attempt != 1 {
		t.Errorf("after stop: strategy %s attempt %d", st, s.Attempt)
	}
	// start of a Halted VM makes it Always.
	if _, _, err := h.c.Do(context.Background(), "start", Key{"default", "halted"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitFor("halted", 5*time.Second, "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	if st, _ := s.VM.RunStrategy(); st != v1.RunStrategyAlways {
		t.Errorf("start of Halted gave strategy %s", st)
	}
}

func TestRestartReplacesTheVMIAndClearsRecord(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Always", nil))
	h := startHarness(t, testConfig(state, 0.01), path)
	s := h.waitFor("vm", 5*time.Second, "Running", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning })
	first := s.VMI.UID
	if _, _, err := h.c.Do(context.Background(), "restart", Key{"default", "vm"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitFor("vm", 5*time.Second, "a new Running VMI", func(s *Snapshot) bool {
		return s.VMI.UID != first && s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning
	})
	if s.Attempt != 2 || s.VM.Status.StartFailure != nil {
		t.Errorf("after restart: %s", describe(s))
	}
}

func TestKilledControllerResumesBackoffAndAdoptsLaunchers(t *testing.T) {
	state, mdir := tempDirs(t)
	crashy := writeFile(t, filepath.Join(mdir, "crashy.yaml"), vmYAML("crashy", "Always", map[string]string{failFast: ""}))
	steady := writeFile(t, filepath.Join(mdir, "steady.yaml"), vmYAML("steady", "Always", nil))
	cfg := testConfig(state, 0.01) // 3rd retry waits 0.9-1.35 s
	h := startHarness(t, cfg, crashy, steady)
	h.waitFor("crashy", 10*time.Second, "3 failures", func(s *Snapshot) bool {
		return failCountOf(s) == 3 && s.VM.Status.PrintableStatus == v1.VirtualMachineStatusCrashLoopBackOff
	})
	running := h.waitFor("steady", 5*time.Second, "Running", func(s *Snapshot) bool { return s.LauncherPID != 0 && s.VMI.IsRunning() })
	h.stop() // StopOnExit is off: like a kill, nothing is stopped
	rec, err := (&Store{dir: state}).Load(Key{"default", "crashy"})
	if err != nil {
		t.Fatal(err)
	}
	retryAfter := *rec.RetryAfter
	if !(LauncherRef{PID: running.LauncherPID, StartTicks: mustTicks(t, running.LauncherPID)}).Alive() {
		t.Fatal("launcher of steady died with the controller")
	}

	h2 := startHarness(t, cfg, crashy, steady)
	s := h2.waitFor("crashy", 10*time.Second, "4 failures", func(s *Snapshot) bool { return failCountOf(s) >= 4 })
	starts := h2.eventsOf("crashy", EventStarted)
	if len(starts) == 0 || starts[0].Time.Before(retryAfter) {
		t.Fatalf("restarted controller launched at %v, before the saved retry time %v", starts[0].Time, retryAfter)
	}
	if !starts[0].PlannedAt.Equal(retryAfter) {
		t.Errorf("first start planned at %v, saved retry %v", starts[0].PlannedAt, retryAfter)
	}
	if s.Attempt != failCountOf(s) || s.Attempt < rec.Attempt+1 {
		t.Errorf("after resume: %s; saved attempt was %d", describe(s), rec.Attempt)
	}
	adopted := h2.waitFor("steady", 5*time.Second, "adopted", func(s *Snapshot) bool { return s.LauncherPID == running.LauncherPID })
	if adopted.Attempt != 1 || len(h2.eventsOf("steady", EventAdopted)) != 1 {
		t.Errorf("steady after resume: %s", describe(adopted))
	}
	// Stopping the adopted VMI reaches its launcher.
	if _, _, err := h2.c.Do(context.Background(), "stop", Key{"default", "steady"}); err != nil {
		t.Fatal(err)
	}
	h2.waitFor("steady", 5*time.Second, "Stopped", func(s *Snapshot) bool { return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped })
	if syscall.Kill(running.LauncherPID, 0) == nil {
		if ticks, _, err := procStat(running.LauncherPID); err == nil && ticks == mustTicks(t, running.LauncherPID) {
			t.Error("adopted launcher still running after stop")
		}
	}
}

func mustTicks(t *testing.T, pid int) uint64 {
	ticks, _, err := procStat(pid)
	if err != nil {
		return 0
	}
	return ticks
}

func TestShutdownStopsVMIsWithoutCountingAFailure(t *testing.T) {
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Always", nil))
	cfg := testConfig(state, 0.01)
	cfg.StopOnExit = true
	h := startHarness(t, cfg, path)
	s := h.waitFor("vm", 5*time.Second, "Running", func(s *Snapshot) bool { return s.LauncherPID != 0 && s.VMI.IsRunning() })
	pid := s.LauncherPID
	h.stop()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("launcher %d still alive after shutdown", pid)
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
	c, err := New(testConfig(state, 1))
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := ReadManifests([]string{path})
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
	if _, err := New(testConfig(file, 1)); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("state folder that is a file: %v", err)
	}
	if _, err := New(testConfig(filepath.Join(file, "sub"), 1)); err == nil {
		t.Error("state folder under a file accepted")
	}
	// Two controllers on one folder: the second is refused.
	state, mdir := tempDirs(t)
	path := writeFile(t, filepath.Join(mdir, "vm.yaml"), vmYAML("vm", "Halted", nil))
	startHarness(t, testConfig(state, 1), path)
	time.Sleep(100 * time.Millisecond)
	c2, err := New(testConfig(state, 1))
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := ReadManifests([]string{path})
	if err := c2.Run(context.Background(), ms); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second controller on one folder: %v", err)
	}
}

// The stats request counts the launchers being watched, and once they
// are gone the goroutines and descriptors are back to where they were.
func TestStatsGiveBackAfterStop(t *testing.T) {
	dir := t.TempDir()
	m := writeFile(t, filepath.Join(dir, "vm.yaml"), vmYAML("runner", "Halted", nil))
	h := startHarness(t, testConfig(filepath.Join(dir, "state"), 0.01), m)
	h.waitFor("runner", 5*time.Second, "Stopped", func(s *Snapshot) bool {
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
	writeFile(t, m, vmYAML("runner", "Always", nil))
	h.waitFor("runner", 10*time.Second, "Running", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusRunning
	})
	if during := stats(); during.LiveLaunchers != 1 {
		t.Fatalf("stats with a running VM: %+v", during)
	}
	writeFile(t, m, vmYAML("runner", "Halted", nil))
	h.waitFor("runner", 10*time.Second, "Stopped", func(s *Snapshot) bool {
		return s.VM.Status.PrintableStatus == v1.VirtualMachineStatusStopped && s.LauncherPID == 0
	})
	// The launcher's watcher ends just after the worker saw the exit.
	deadline := time.Now().Add(5 * time.Second)
	after := stats()
	for (after.Goroutines != before.Goroutines || after.OpenFDs != before.OpenFDs) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		after = stats()
	}
	if after.Goroutines != before.Goroutines || after.OpenFDs != before.OpenFDs || after.LiveLaunchers != 0 {
		t.Fatalf("after the stop: %+v, before the run: %+v", after, before)
	}
}
