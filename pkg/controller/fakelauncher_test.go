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

func fakeLauncher(args []string) int {
	attempt := 1
	for i, a := range args {
		if a == "--attempt" && i+1 < len(args) {
			attempt, _ = strconv.Atoi(args[i+1])
		}
	}
	data, err := os.ReadFile(args[len(args)-1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(data, vmi); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	emit := func(event, phase, reason string, code *int) {
		line, _ := json.Marshal(map[string]any{"time": time.Now().Format(time.RFC3339Nano), "event": event,
			"vmi": vmi.Name, "namespace": vmi.Namespace, "uid": vmi.UID, "phase": phase, "reason": reason, "exitCode": code})
		os.Stdout.Write(append(line, '\n'))
	}
	code := func(c int) *int { return &c }
	behavior := vmi.Annotations[fakeBehavior]
	if _, ok := vmi.Annotations[v1.FuncTestLauncherFailFastAnnotation]; ok {
		behavior = "fail-attempts=1000000"
	}
	if n, ok := strings.CutPrefix(behavior, "fail-attempts="); ok {
		if limit, _ := strconv.Atoi(n); attempt <= limit {
			fmt.Fprintln(os.Stderr, "panic: fake launcher crash")
			return 2
		}
		behavior = "run"
	}
	emit("Scheduled", "Scheduled", "", nil)
	if behavior == "fail-start" {
		emit("Failed", "Failed", "QemuStartTimeout", code(10))
		return 10
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	time.Sleep(5 * time.Millisecond)
	emit("Running", "Running", "", nil)
	emit("GuestReady", "Running", "", nil)
	var after <-chan time.Time
	if d, ok := strings.CutPrefix(behavior, "succeed-after="); ok {
		dur, _ := time.ParseDuration(d)
		after = time.After(dur)
	}
	select {
	case <-sig:
		emit("Succeeded", "Succeeded", "Stopped", code(0))
	case <-after:
		emit("Succeeded", "Succeeded", "GuestShutdown", code(0))
	}
	return 0
}
