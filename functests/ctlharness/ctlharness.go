// Package ctlharness drives a real virt-controller process for the
// functional suites that need one (functests/controller and
// functests/crashloop): it starts "virt-controller run -o json", collects
// its JSON lines, stops it, and runs its second-terminal commands. It uses
// only the binary and the controller's public event type.
package ctlharness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/controller"
	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// Binaries are the programs under test and the guest image folder.
type Binaries struct {
	Controller string
	Launcher   string
	ImageDir   string
}

// Proc is a running virt-controller whose JSON lines are collected.
type Proc struct {
	// Started is when the process was started.
	Started time.Time

	proc   *spawn.Process
	stderr string

	mu     sync.Mutex
	events []controller.Event
}

// Start runs "virt-controller run -o json" on stateDir with seed, extra
// flags and manifests; its stderr goes to a file in logDir. It waits for
// the ControllerStarted event and registers Terminate as a cleanup.
func Start(b Binaries, stateDir, logDir string, seed int, extra []string, manifests ...string) *Proc {
	args := append([]string{"run", "-o", "json", "--state-dir", stateDir, "--seed", strconv.Itoa(seed),
		"--launcher", b.Launcher, "--launcher-arg=--image-dir=" + b.ImageDir}, extra...)
	p := &Proc{stderr: filepath.Join(logDir, fmt.Sprintf("controller-%d.stderr", time.Now().UnixNano()))}
	out := spawn.NewLineWriter(func(line []byte) {
		var e controller.Event
		if json.Unmarshal(line, &e) == nil {
			p.mu.Lock()
			p.events = append(p.events, e)
			p.mu.Unlock()
		}
	})
	p.Started = time.Now()
	proc, err := spawn.Start(spawn.Spec{Path: b.Controller, Args: append(args, manifests...), Stdout: out, StderrFile: p.stderr})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	p.proc = proc
	ginkgo.DeferCleanup(p.Terminate)
	gomega.Eventually(func() int { return len(p.Events(controller.EventControllerStarted, "")) }, 30*time.Second, 10*time.Millisecond).
		Should(gomega.Equal(1), func() string { return "controller did not start: " + p.Stderr() })
	return p
}

// Terminate stops the controller with SIGTERM (it stops its VMIs and waits
// for their launchers) and waits for it; SIGKILL after 60 s.
func (p *Proc) Terminate() {
	_, err := p.proc.Stop(context.Background(), 60*time.Second)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
}

// Kill9 kills the controller with SIGKILL, as a crash would.
func (p *Proc) Kill9() {
	gomega.Expect(p.proc.Signal(syscall.SIGKILL)).To(gomega.Succeed())
	gomega.Eventually(p.proc.Done(), 10*time.Second).Should(gomega.BeClosed())
}

// Events returns the events of one kind ("" for all) of one VM ("" for
// all; a bare name means namespace default).
func (p *Proc) Events(kind controller.EventKind, vmName string) []controller.Event {
	if vmName != "" && !strings.Contains(vmName, "/") {
		vmName = "default/" + vmName
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []controller.Event
	for _, e := range p.events {
		if (kind == "" || e.Event == kind) && (vmName == "" || e.VM == vmName) {
			out = append(out, e)
		}
	}
	return out
}

// Stderr returns the last 4000 bytes the controller wrote to stderr.
func (p *Proc) Stderr() string {
	b, _ := os.ReadFile(p.stderr)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// CLI runs a virt-controller command and returns stdout, stderr and the
// exit code.
func CLI(controllerBin string, args ...string) (string, string, int) {
	cmd := exec.Command(controllerBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		ginkgo.Fail(fmt.Sprintf("running virt-controller %v: %v", args, err))
	}
	return out.String(), errb.String(), code
}

// Status reads a VM with "virt-controller status NAME -o json".
func Status(controllerBin, stateDir, name string) *v1.VirtualMachine {
	out, errs, code := CLI(controllerBin, "status", name, "-o", "json", "--state-dir", stateDir)
	gomega.Expect(code).To(gomega.Equal(0), "status %s: %s", name, errs)
	m := &v1.VirtualMachine{}
	gomega.Expect(json.Unmarshal([]byte(out), m)).To(gomega.Succeed(), out)
	return m
}

// FailCount is status.startFailure.consecutiveFailCount, 0 without a record.
func FailCount(m *v1.VirtualMachine) int {
	if m.Status.StartFailure == nil {
		return 0
	}
	return m.Status.StartFailure.ConsecutiveFailCount
}
