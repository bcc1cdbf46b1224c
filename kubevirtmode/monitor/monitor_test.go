package monitor

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// rendered is the compute command line virt-controller v1.6.0 renders
// (pkg/virt-controller/services/template.go), with every optional flag.
var rendered = []string{
	"--qemu-timeout", "263s", "--name", "vm1", "--uid", "0b8a", "--namespace", "ns",
	"--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
	"--container-disk-dir", "/var/run/kubevirt/container-disks", "--grace-period-seconds", "45",
	"--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
	"--run-as-nonroot", "--image-volume", "--libvirt-log-filters", "3:remote 4:event",
	"--allow-emulation", "--keep-after-failure", "--simulate-crash",
}

func TestParseFlagsAcceptsTheRenderedCommandLine(t *testing.T) {
	f, err := ParseFlags(rendered, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.QemuTimeout != 263*time.Second || f.Name != "vm1" || f.UID != "0b8a" || f.Namespace != "ns" ||
		f.GracePeriod() != 45*time.Second || !f.AllowEmulation || !f.KeepAfterFailure || !f.SimulateCrash || !f.RunAsNonRoot {
		t.Fatalf("parsed %+v", f)
	}
}

func TestParseFlagsNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "a", "--uid", "u"}, "--namespace is required"},
		{append(append([]string{}, rendered...), "--hook-sidecars", "-1"), `invalid argument "-1" for "--hook-sidecars"`},
		{append(append([]string{}, rendered...), "--qemu-timeout", "0s"), "--qemu-timeout 0s: want a positive duration"},
		{append(append([]string{}, rendered...), "--no-such-flag"), "unknown flag: --no-such-flag"},
		{append(append([]string{}, rendered...), "vmi.yaml"), "takes flags only"},
	} {
		_, err := ParseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args[len(tc.args)-2:], err, tc.want)
		}
	}
}

func TestLauncherArgsAskForKVMUnlessEmulationIsAllowed(t *testing.T) {
	f, err := ParseFlags(rendered[:len(rendered)-3], io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := launcherapi.ParseArgs(f.launcherArgs("/x/vmi.json", "/x/console.log", launcherapi.PodNetworkKubeVirtTap, 7), launcherapi.DefaultArgs(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a.Accel != launcherapi.AccelKVM || a.StartTimeout != launcherapi.FixedStartTimeout(263*time.Second) || a.Manifest != "/x/vmi.json" || a.HookSidecars != 0 {
		t.Fatalf("launcher args %+v", a)
	}
	// virt-handler's bind mounts are where the launcher reads the pod's
	// containerDisks and kernel-boot files.
	if a.ContainerDiskDir != "/var/run/kubevirt/container-disks" {
		t.Fatalf("launcher's --container-disk-dir %q, want the pod's /var/run/kubevirt/container-disks", a.ContainerDiskDir)
	}
	// With virt-handler's tap0 in the pod, the launcher plugs the NIC into it.
	if a.PodNetwork != launcherapi.PodNetworkKubeVirtTap {
		t.Fatalf("launcher's --pod-network %q, want %s", a.PodNetwork, launcherapi.PodNetworkKubeVirtTap)
	}
	if a.Seed != 7 {
		t.Fatalf("launcher's --seed %v, want the pod's 7 (the monitor's own faults are drawn with it)", a.Seed)
	}
	// The pod's sidecar count reaches the launcher, which waits for them.
	f.HookSidecars = 2
	if a, _ := launcherapi.ParseArgs(f.launcherArgs("/x/vmi.json", "", "", 0), launcherapi.DefaultArgs(), io.Discard); a.HookSidecars != 2 {
		t.Fatalf("--hook-sidecars 2: launcher's %d", a.HookSidecars)
	}
	f.AllowEmulation = true
	if a, _ := launcherapi.ParseArgs(f.launcherArgs("/x/vmi.json", "", "", 0), launcherapi.DefaultArgs(), io.Discard); a.Accel != launcherapi.AccelAuto {
		t.Fatalf("--allow-emulation: accel %q, want auto", a.Accel)
	}
}

func TestFinalStateGivesVirtHandlersPhase(t *testing.T) {
	ev := func(phase, reason, msg string) launcherapi.Event {
		return launcherapi.Event{Event: phase, Phase: phase, Reason: reason, Message: msg}
	}
	stopped := func(how, msg string) launcherapi.Event {
		e := ev(launcherapi.PhaseSucceeded, launcherapi.ReasonStopped, msg)
		e.Stopped = &launcherapi.StoppedDetails{How: how}
		return e
	}
	for _, tc := range []struct {
		ev      launcherapi.Event
		running bool
		state   api.LifeCycle
		reason  api.StateChangeReason
	}{
		{ev(launcherapi.PhaseSucceeded, launcherapi.ReasonGuestShutdown, ""), true, api.Shutoff, api.ReasonShutdown},
		{stopped(launcherapi.StopGraceful, "stopped: the guest shut down within the grace period"), true, api.Shutoff, api.ReasonShutdown},
		{stopped(launcherapi.StopDestroyed, "stopped: the guest did not shut down within the 10s grace period; domain destroyed"), true, api.Shutoff, api.ReasonDestroyed},
		// The typed detail decides, not the message's words.
		{stopped(launcherapi.StopDestroyed, "stopped: graceful shutdown failed"), true, api.Shutoff, api.ReasonDestroyed},
		{stopped(launcherapi.StopGraceful, "a message that says destroyed"), true, api.Shutoff, api.ReasonShutdown},
		{stopped(launcherapi.StopBeforeRunning, "stopped before the domain was running"), false, api.Shutoff, api.ReasonShutdown},
		{ev(launcherapi.PhaseFailed, launcherapi.ReasonVMCrashed, ""), true, api.Shutoff, api.ReasonCrashed},
		{ev(launcherapi.PhaseFailed, launcherapi.ReasonGuestPanicked, ""), true, api.Crashed, api.ReasonPanicked},
		{ev(launcherapi.PhaseFailed, launcherapi.ReasonInternalError, ""), true, api.Shutoff, api.ReasonCrashed},
		{ev(launcherapi.PhaseFailed, launcherapi.ReasonLibvirtError, ""), false, api.Shutoff, api.ReasonFailed},
		{ev(launcherapi.PhaseFailed, launcherapi.ReasonQemuStartTimeout, ""), false, api.Shutoff, api.ReasonFailed},
	} {
		state, reason := finalState(tc.ev, tc.running)
		if state != tc.state || reason != tc.reason {
			t.Errorf("%s %s %+v %q running=%v: got %s/%s, want %s/%s", tc.ev.Phase, tc.ev.Reason, tc.ev.Stopped, tc.ev.Message, tc.running, state, reason, tc.state, tc.reason)
		}
	}
}

func TestManifestLeavesOutStatusServerFieldsAndTheFailFastAnnotation(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u", ResourceVersion: "7",
		Annotations: map[string]string{faults.FailFastAnnotation: "", faults.AnnotationPrefix + "qemu-hang": ""}},
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled}}
	data, err := manifestFor(vmi)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, bad := range []string{faults.FailFastAnnotation, "resourceVersion", "Scheduled", "status"} {
		if strings.Contains(s, bad) {
			t.Errorf("manifest has %q: %s", bad, s)
		}
	}
	if !strings.Contains(s, faults.AnnotationPrefix+"qemu-hang") {
		t.Errorf("manifest lost the fault annotation: %s", s)
	}
}

func TestNewDomainCarriesTheVMIsUIDAndGracePeriod(t *testing.T) {
	grace := int64(12)
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-1"},
		Spec: v1.VirtualMachineInstanceSpec{TerminationGracePeriodSeconds: &grace}}
	d := newDomain(vmi, graceSeconds(vmi))
	if d.ObjectMeta.UID != "u-1" || d.Spec.Metadata.KubeVirt.UID != "u-1" || d.Spec.Name != "ns_a" ||
		d.Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds != 12 || d.Status.Status != api.Shutoff {
		t.Fatalf("domain %+v", d)
	}
	if g := graceSeconds(&v1.VirtualMachineInstance{}); g != 30 {
		t.Fatalf("default grace %d, want 30", g)
	}
}

func TestLastLineKeepsTheLastCompleteLine(t *testing.T) {
	var l lastLine
	for _, w := range []string{"first\n", "sec", "ond\n\n  \n", "partial"} {
		_, _ = l.Write([]byte(w))
	}
	if got := l.String(); got != "second" {
		t.Fatalf("last line %q, want second", got)
	}
}

// TestDomainIsPausedStartingUpWhileTheStartIsInFlight: GetDomain answers as
// libvirt's state reads (Paused/StartingUp) between our launcher's
// Scheduled and Running, so a restarted virt-handler listing the domain
// finds it alive; the pushed state stays Shutoff/Unknown, and Running,
// a kill or a failed start end the answer.
func TestDomainIsPausedStartingUpWhileTheStartIsInFlight(t *testing.T) {
	newStarting := func() (*Monitor, *child) {
		m := New(Flags{Name: "a", Namespace: "ns", ShareDir: t.TempDir()}, t.TempDir(), slog.New(slog.DiscardHandler), io.Discard)
		m.vmi = &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-1"}}
		c := &child{}
		m.cur = c
		if m.Domain() != nil {
			t.Fatal("a domain before Scheduled")
		}
		m.onEvent(c, launcherapi.Event{Event: launcherapi.EventScheduled})
		return m, c
	}
	state := func(d *api.Domain) string { return string(d.Status.Status) + "/" + string(d.Status.Reason) }
	m, c := newStarting()
	if got := state(m.Domain()); got != "Paused/StartingUp" {
		t.Fatalf("GetDomain while starting: %s, want Paused/StartingUp", got)
	}
	if got := state(m.domain); got != "Shutoff/Unknown" {
		t.Fatalf("pushed state while starting: %s, want Shutoff/Unknown", got)
	}
	m.onEvent(c, launcherapi.Event{Event: launcherapi.EventRunning})
	if got := state(m.Domain()); got != "Running/Unknown" {
		t.Fatalf("GetDomain once running: %s", got)
	}

	m, _ = newStarting()
	m.killed = true
	if got := state(m.Domain()); got != "Shutoff/Unknown" {
		t.Fatalf("GetDomain of a killed start: %s, want Shutoff/Unknown", got)
	}
	m, _ = newStarting()
	m.cur = nil
	m.setState(api.Shutoff, api.ReasonFailed)
	if got := state(m.Domain()); got != "Shutoff/Failed" {
		t.Fatalf("GetDomain after a failed start: %s, want Shutoff/Failed", got)
	}
}
