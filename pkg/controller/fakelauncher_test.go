package controller

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// The test binary doubles as a fake virt-launcher (FAKE_LAUNCHER=1), so
// the controller's tests run real processes without QEMU. It speaks the
// launcher's contract: JSON events on stdout, exit codes, SIGTERM.
// Its behaviour comes from the VMI annotation fakeBehavior:
//
//	run                 Scheduled, Running, GuestReady; on SIGTERM Succeeded, exit 0 (default)
//	succeed-after=DUR   Scheduled, Running, then Succeeded after DUR, exit 0
//	fail-start          Scheduled, then Failed (QemuStartTimeout), exit 10
//	fail-attempts=N     crash (exit 2, no events) while --attempt <= N, else run
//
// KubeVirt's fail-fast annotation crashes it at once, as the real one.
const fakeBehavior = "fake.crashloop.test/behavior"

func TestMain(m *testing.M) {
	if os.Getenv("FAKE_LAUNCHER") == "1" {
		os.Exit(fakeLauncher(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeLauncher(argv []string) int {
	args, err := launcherapi.ParseArgs(argv, launcherapi.DefaultArgs(), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return int(launcherapi.ExitUsage)
	}
	attempt := args.Attempt
	data, err := os.ReadFile(args.Manifest)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return int(launcherapi.ExitInputUnreadable)
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(data, vmi); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return int(launcherapi.ExitInvalidManifest)
	}
	emit := func(event, phase, reason string, code *int) {
		line, _ := launcherapi.Event{Time: time.Now(), Event: event, VMI: vmi.Name, Namespace: vmi.Namespace,
			UID: string(vmi.UID), Phase: phase, Attempt: attempt, Reason: reason, ExitCode: code}.MarshalLine()
		os.Stdout.Write(line)
	}
	code := func(c int) *int { return &c }
	behavior := vmi.Annotations[fakeBehavior]
	if _, ok := vmi.Annotations[v1.FuncTestLauncherFailFastAnnotation]; ok {
		behavior = "fail-attempts=1000000"
	}
	if n, ok := strings.CutPrefix(behavior, "fail-attempts="); ok {
		if limit, _ := strconv.Atoi(n); attempt <= limit {
			fmt.Fprintln(os.Stderr, "panic: fake launcher crash")
			return int(launcherapi.ExitPanic)
		}
		behavior = "run"
	}
	emit(launcherapi.EventScheduled, launcherapi.PhaseScheduled, "", nil)
	if behavior == "fail-start" {
		emit(launcherapi.EventFailed, launcherapi.PhaseFailed, launcherapi.ReasonQemuStartTimeout, code(int(launcherapi.ExitQemuStartTimeout)))
		return int(launcherapi.ExitQemuStartTimeout)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	time.Sleep(5 * time.Millisecond)
	emit(launcherapi.EventRunning, launcherapi.PhaseRunning, "", nil)
	emit(launcherapi.EventGuestReady, launcherapi.PhaseRunning, "", nil)
	var after <-chan time.Time
	if d, ok := strings.CutPrefix(behavior, "succeed-after="); ok {
		dur, _ := time.ParseDuration(d)
		after = time.After(dur)
	}
	select {
	case <-sig:
		emit(launcherapi.EventSucceeded, launcherapi.PhaseSucceeded, launcherapi.ReasonStopped, code(0))
	case <-after:
		emit(launcherapi.EventSucceeded, launcherapi.PhaseSucceeded, launcherapi.ReasonGuestShutdown, code(0))
	}
	return 0
}
