package launchplan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func TestRunPlanRoundTrip(t *testing.T) {
	grace := int64(7)
	args := launcherapi.DefaultArgs()
	args.Manifest, args.Seed, args.Faults = "-", 9, []string{"qemu-kill=after=2s"}
	plan, err := faults.Parse(map[string]string{faults.AnnotationPrefix + "launcher-crash": "at=before-start"}, args.Faults)
	if err != nil {
		t.Fatal(err)
	}
	want := RunPlan{
		Args: args, Faults: plan, Input: "stdin",
		VMI:                VMI{Name: "v", Namespace: "ns", UID: "u-1"},
		GracePeriodSeconds: &grace,
		DomainXML:          "<domain/>", Root: "/run/x/vmi-1", Scratch: "/run/x/vmi-1/scratch",
		ConsoleLog: "/c.log", LibvirtLog: "/c.libvirt.log", Accel: "tcg", AccelReason: "no vmx",
		Ports:  []launcherapi.PortForward{{Interface: "default", Protocol: "TCP", GuestPort: 22, HostAddress: "127.0.0.1", HostPort: 40000}},
		Reaper: &Reaper{PID: 42, FD: 5},
	}
	f, err := File(want)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The descriptor must survive exec: no close-on-exec flag.
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Fatalf("plan file descriptor flags %#x (err %v): want it kept open across exec", flags, err)
	}
	got, err := Read[RunPlan](f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b faults.Plan) bool { return a.String() == b.String() })); diff != "" {
		t.Errorf("plan after the round trip (-want +got):\n%s", diff)
	}
	if got.Faults.String() != "launcher-crash=at=before-start qemu-kill=after=2s" {
		t.Errorf("fault plan after the round trip: %s", got.Faults)
	}
}

func TestReadPlanRejectsUnknownFields(t *testing.T) {
	_, err := Read[RunPlan](strings.NewReader(`{"args":{},"domainXML":"<domain/>","bogus":1}`))
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("want an error naming the unknown field, got %v", err)
	}
	if _, err := Read[RunPlan](strings.NewReader("")); err == nil {
		t.Fatal("an empty plan: want an error")
	}
}

func TestPlanFolders(t *testing.T) {
	for _, c := range []struct {
		name string
		p    RunPlan
		want []string
	}{
		{"embedded", RunPlan{Root: "/r", Scratch: "/r/scratch"}, []string{"/r"}},
		{"external libvirt", RunPlan{Scratch: "/run/faults-1"}, []string{"/run/faults-1"}},
		{"nothing made", RunPlan{}, nil},
	} {
		if diff := cmp.Diff(c.want, c.p.Folders()); diff != "" {
			t.Errorf("%s: folders (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestReceiveNamesTheFlag(t *testing.T) {
	for _, args := range [][]string{nil, {"x"}, {"-1"}, {"3", "4"}} {
		if _, err := Receive[RunPlan](RunFlag, args); err == nil || !strings.Contains(err.Error(), RunFlag) {
			t.Errorf("Receive(%q) = %v, want an error naming %s", args, err, RunFlag)
		}
	}
}

// TestPanicText: the simulated crash prints what a fatal panic of
// KubeVirt's value prints: the message, a blank line, then the stack of
// the crashing goroutine, its caller first.
func TestPanicText(t *testing.T) {
	got := string(panicText())
	const head = "panic: Simulated virt-launcher crash\n\ngoroutine "
	if !strings.HasPrefix(got, head) || !strings.Contains(got, " [running]:\ngithub.com/crashloop-harness/crashloop/internal/launchplan.panicText(") ||
		!strings.Contains(got, "launchplan.TestPanicText(") {
		t.Fatalf("panicText() = %q; want %q then this goroutine's stack", got, head)
	}
}
