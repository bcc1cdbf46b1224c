package conformance_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// faultRow is one fault in KubeVirt mode and what virt-handler sees.
type faultRow struct {
	fault, term string
	extra       []string // compute flags
	// syncErr is a substring of SyncVirtualMachine's error, "" for success.
	syncErr string
	// state/reason is the domain state virt-handler is told at the end, ""
	// for none beyond what Sync left.
	state  api.LifeCycle
	reason api.StateChangeReason
	// exit is the pod's exit code; -1: the pod stays up and ends with
	// DeleteVirtualMachine (exit 0).
	exit int
	// k8sEvent is a substring of a Kubernetes event virt-handler records.
	k8sEvent string
}

var _ = Describe("faults in KubeVirt mode, as virt-handler sees them", func() {
	rows := []faultRow{
		{fault: "launcher-crash", term: "at=before-libvirt", syncErr: "Unavailable", exit: 2},
		{fault: "launcher-crash", term: "at=before-define", syncErr: "Unavailable", exit: 2},
		{fault: "launcher-crash", term: "at=before-start", syncErr: "Unavailable", exit: 2},
		{fault: "launcher-crash", term: "at=after-running", exit: 2},
		{fault: "libvirt-error", term: "at=start", syncErr: "LibvirtError", exit: -1, k8sEvent: "FaultFired libvirt-error"},
		{fault: "qemu-bad-config", syncErr: "QemuFailed", exit: -1},
		{fault: "qemu-hang", extra: []string{"--qemu-timeout", "8s"}, syncErr: "Unavailable", exit: 2},
		{fault: "qemu-slow-start", term: "after=2s", state: api.Running, reason: api.ReasonUnknown, exit: -1},
		{fault: "qemu-kill", term: "signal=SIGKILL,after=2s", state: api.Shutoff, reason: api.ReasonCrashed, exit: -1},
		{fault: "guest-panic", term: "after=1s", state: api.Crashed, reason: api.ReasonPanicked, exit: -1},
		{fault: "guest-poweroff", term: "after=1s", state: api.Shutoff, reason: api.ReasonShutdown, exit: -1},
	}
	for _, r := range rows {
		name := r.fault
		if r.term != "" {
			name += " " + r.term
		}
		It(name, func() { runFaultRow(r) })
	}

	It("reports QEMU OOM-killed by the kernel (a memory limit below its needs) as a crashed domain", func() {
		p := startPod(podSpec{podman: []string{"--memory", "64m", "--memory-swap", "64m"}})
		c := p.connect()
		err := c.SyncVirtualMachine(p.vmi, nil)
		if err != nil {
			// killed before Running: a failed start, as for qemu-kill then
			Expect(err.Error()).To(ContainSubstring("QemuFailed"))
			AddReportEntry("observed", "Sync: error "+firstLine(err.Error()))
		} else {
			p.waitState(api.Shutoff, api.ReasonCrashed, 60*time.Second)
			AddReportEntry("observed", "Sync: ok; domain events: "+describe(p.seen))
		}
		p.deleteAndExit()
	})

	It("ignores the fail-fast annotation without --simulate-crash: virt-controller turns it into the flag, KubeVirt's launcher never reads it", func() {
		p := runningPod(podSpec{annotations: map[string]string{faults.FailFastAnnotation: ""}})
		Expect(p.client.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		p.deleteAndExit()
	})
})

func runFaultRow(r faultRow) {
	p := startPod(podSpec{annotations: map[string]string{faults.AnnotationPrefix + r.fault: r.term}, extra: r.extra})
	c := p.connect()
	start := time.Now()
	err := c.SyncVirtualMachine(p.vmi, nil)
	var seen []string
	note := func(format string, args ...any) { seen = append(seen, fmt.Sprintf(format, args...)) }
	if err != nil {
		note("Sync: error %q after %.1fs", firstLine(err.Error()), time.Since(start).Seconds())
	} else {
		note("Sync: ok after %.1fs", time.Since(start).Seconds())
	}
	if r.syncErr == "" {
		Expect(err).NotTo(HaveOccurred(), "pod log:\n%s", p.out)
	} else {
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(r.syncErr))
	}
	if r.exit == -1 && r.syncErr != "" {
		// virt-handler retries: the pod is alive and a retry fails the same way.
		Expect(c.Ping()).To(Succeed())
		err := c.SyncVirtualMachine(p.vmi, nil)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(r.syncErr))
		note("retry: error again")
	}
	if r.state != "" {
		p.waitState(r.state, r.reason, 60*time.Second)
	}
	if r.exit >= 0 {
		Expect(p.waitExit(60*time.Second)).To(Equal(r.exit), "pod log:\n%s", p.out)
		note("pod exit %d", r.exit)
	} else {
		if r.state == api.Running {
			// virt-handler deletes a running domain only after it is
			// stopped: Delete is libvirt's undefine, which leaves a
			// live domain running.
			Expect(c.KillVirtualMachine(p.vmi)).To(Succeed())
			p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		}
		p.deleteAndExit()
		note("alive until Delete, exit 0")
	}
	drain(p)
	note("domain events: %s", describe(p.seen))
	events := p.k8sEvents()
	if r.k8sEvent != "" {
		Expect(strings.Join(events, "\n")).To(ContainSubstring(r.k8sEvent))
	}
	if len(events) > 0 {
		note("k8s events: %s", strings.Join(events, "; "))
	}
	AddReportEntry("observed", strings.Join(seen, "; "))
}

// drain reads the domain events still queued.
func drain(p *pod) {
	for {
		select {
		case ev := <-p.events:
			p.seen = append(p.seen, ev)
		default:
			return
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}
