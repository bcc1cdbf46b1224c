package launcherapi

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestPlanFileRoundTrip(t *testing.T) {
	grace := int64(7)
	want := RunPlan{
		Argv: []string{"--seed", "9", "-"}, Input: "stdin",
		VMI:         PlanVMI{Name: "v", Namespace: "ns", UID: "u-1"},
		Annotations: map[string]string{"a": "b"}, GracePeriodSeconds: &grace,
		DomainXML: "<domain/>", Root: "/run/x/vmi-1", Scratch: "/run/x/vmi-1/scratch",
		ConsoleLog: "/c.log", LibvirtLog: "/c.libvirt.log", Accel: "tcg", AccelReason: "no vmx",
		Ports:  []PortForward{{Interface: "default", Protocol: "TCP", GuestPort: 22, HostAddress: "127.0.0.1", HostPort: 40000}},
		Reaper: &PlanReaper{PID: 42, FD: 5},
	}
	f, err := PlanFile(want)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The descriptor must survive exec: no close-on-exec flag.
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Fatalf("plan file descriptor flags %#x (err %v): want it kept open across exec", flags, err)
	}
	got, err := ReadPlan(f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan after the round trip (-want +got):\n%s", diff)
	}
}

func TestReadPlanRejectsUnknownFields(t *testing.T) {
	_, err := ReadPlan(strings.NewReader(`{"argv":[],"domainXML":"<domain/>","bogus":1}`))
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("want an error naming the unknown field, got %v", err)
	}
	if _, err := ReadPlan(strings.NewReader("")); err == nil {
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
