package launcher_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

var vmiTemplate = template.Must(template.New("vmi").Parse(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: {{.Name}}
  namespace: functest
  uid: {{.UID}}
{{- if .Annotations}}
  annotations:
{{- range $k, $v := .Annotations}}
    {{$k}}: "{{$v}}"
{{- end}}
{{- end}}
spec:
  terminationGracePeriodSeconds: {{.Grace}}
  domain:
    memory:
      guest: 256Mi
    firmware:
      kernelBoot:
        kernelArgs: "console=ttyS0 quiet panic=-1 {{.KernelArgs}}"
        container:
          image: localhost/crashloop/test-guest:latest
          kernelPath: /boot/vmlinuz
          initrdPath: /boot/initrd.img
    devices:
      disks:
        - name: data
          disk:
            bus: virtio
  volumes:
    - name: data
      containerDisk:
        image: localhost/crashloop/test-guest:latest
`))

// VMISpec parameterizes the test VMI.
type VMISpec struct {
	Name        string
	UID         string
	KernelArgs  string
	Annotations map[string]string
	Grace       int
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Run is one virt-launcher process under test.
type Run struct {
	Name     string
	Domain   string
	Dir      string
	Console  string
	Runtime  string
	cmd      *exec.Cmd
	events   chan launcherapi.Event
	all      []launcherapi.Event
	stderr   *bytes.Buffer
	done     chan struct{}
	exitCode int
	started  time.Time
	ended    time.Time
}

// writeVMI renders a manifest into dir.
func writeVMI(dir string, spec VMISpec) string {
	if spec.Name == "" {
		spec.Name = "ft-" + uuid()[:8]
	}
	if spec.UID == "" {
		spec.UID = uuid()
	}
	if spec.Grace == 0 {
		spec.Grace = 10
	}
	var buf bytes.Buffer
	Expect(vmiTemplate.Execute(&buf, spec)).To(Succeed())
	path := filepath.Join(dir, spec.Name+".yaml")
	Expect(os.WriteFile(path, buf.Bytes(), 0o644)).To(Succeed())
	return path
}

// Start launches virt-launcher on a fresh VMI with extra flags. Cleanup
// kills it by PID if it is still running and checks that no QEMU of its
// domain survives.
func Start(spec VMISpec, flags ...string) *Run {
	if spec.Name == "" {
		spec.Name = "ft-" + uuid()[:8]
	}
	dir, err := os.MkdirTemp("", "cl-ft-")
	Expect(err).NotTo(HaveOccurred())
	r := &Run{Name: spec.Name, Domain: "functest_" + spec.Name, Dir: dir,
		Console: filepath.Join(dir, "console.log"), Runtime: filepath.Join(dir, "run"),
		events: make(chan launcherapi.Event, 100), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	manifest := writeVMI(dir, spec)
	args := append([]string{"--image-dir", built.ImageDir(),
		"--runtime-dir", r.Runtime, "--console-log", r.Console, "--log-level", "debug"}, flags...)
	args = append(args, manifest)
	r.cmd = exec.Command(built.Launcher(), args...)
	r.cmd.Stderr = r.stderr
	stdout, err := r.cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	r.started = time.Now()
	Expect(r.cmd.Start()).To(Succeed())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ev, err := launcherapi.ParseEvent(sc.Bytes())
			if err != nil {
				GinkgoWriter.Printf("not an event: %q\n", sc.Text())
				continue
			}
			r.events <- ev
		}
		close(r.events)
		err := r.cmd.Wait()
		r.ended = time.Now()
		r.exitCode = 0
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				r.exitCode = ee.ExitCode()
			} else {
				r.exitCode = -1
			}
		}
		close(r.done)
	}()
	DeferCleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		Eventually(func() []int { return qemu.FindQEMU(r.Domain, "") }).WithTimeout(5*time.Second).WithPolling(50*time.Millisecond).
			Should(BeEmpty(), "a QEMU of %s outlived its launcher", r.Domain)
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Printf("launcher stderr:\n%s\n", r.stderr.String())
			if c, err := os.ReadFile(r.Console); err == nil {
				GinkgoWriter.Printf("console:\n%s\n", c)
			}
			if c, err := os.ReadFile(strings.TrimSuffix(r.Console, ".log") + ".libvirt.log"); err == nil {
				GinkgoWriter.Printf("libvirt log:\n%s\n", c)
			}
		}
		os.RemoveAll(r.Dir)
	})
	return r
}

// Next waits for the next event, up to timeout.
func (r *Run) Next(timeout time.Duration) launcherapi.Event {
	select {
	case ev, ok := <-r.events:
		Expect(ok).To(BeTrue(), "the launcher closed its output; events so far: %v\nstderr:\n%s", r.names(), r.stderr.String())
		r.all = append(r.all, ev)
		return ev
	case <-time.After(timeout):
		Fail(fmt.Sprintf("no event within %v; events so far: %v", timeout, r.names()))
	}
	return launcherapi.Event{}
}

// WaitFor skips events until one named name arrives.
func (r *Run) WaitFor(name string, timeout time.Duration) launcherapi.Event {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			Fail(fmt.Sprintf("no %s event within %v; events so far: %v", name, timeout, r.names()))
		}
		ev := r.Next(left)
		if ev.Event == name {
			return ev
		}
	}
}

// Exit waits for the process to end and returns its exit code, draining
// the remaining events.
func (r *Run) Exit(timeout time.Duration) int {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-r.events:
			if ok {
				r.all = append(r.all, ev)
			}
		case <-r.done:
			for ev := range r.events {
				r.all = append(r.all, ev)
			}
			return r.exitCode
		case <-deadline:
			Fail(fmt.Sprintf("the launcher did not exit within %v; events: %v", timeout, r.names()))
		}
	}
}

func (r *Run) names() []string {
	var n []string
	for _, e := range r.all {
		n = append(n, e.Event+"/"+e.Reason)
	}
	return n
}

// Events lists the events seen so far.
func (r *Run) Events() []launcherapi.Event { return r.all }

// Find returns the first event named name seen so far.
func (r *Run) Find(name string) (launcherapi.Event, bool) {
	for _, e := range r.all {
		if e.Event == name {
			return e, true
		}
	}
	return launcherapi.Event{}, false
}

// ConsoleHas waits for text on the serial console.
func (r *Run) ConsoleHas(text string, timeout time.Duration) {
	Eventually(func() string { b, _ := os.ReadFile(r.Console); return string(b) }).
		WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(ContainSubstring(text))
}

// Signal sends sig to the launcher process.
func (r *Run) Signal(sig syscall.Signal) {
	Expect(r.cmd.Process.Signal(sig)).To(Succeed())
}

// RuntimeEntries lists what is left in the launcher's runtime folder.
func (r *Run) RuntimeEntries() []string {
	entries, _ := os.ReadDir(r.Runtime)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func final(ev launcherapi.Event) (string, string, int) {
	code := -1
	if ev.ExitCode != nil {
		code = *ev.ExitCode
	}
	return ev.Phase, ev.Reason, code
}

// scheduled is a Scheduled event's values.
func scheduled(ev launcherapi.Event) *launcherapi.ScheduledDetails {
	Expect(ev.Scheduled).NotTo(BeNil(), "event %s carries no Scheduled values", ev.Event)
	return ev.Scheduled
}
