package clusterlite

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseNSpid(t *testing.T) {
	for _, c := range []struct {
		status string
		want   []int
		err    string
	}{
		{status: "Name:\tsleep\nNSpid:\t4242\t57\t1\nNSsid: 1\n", want: []int{4242, 57, 1}},
		{status: "NSpid:\t7\n", want: []int{7}},
		{status: "Name:\tsleep\n", err: "no NSpid line"},
		{status: "NSpid:\t7\tx\n", err: `NSpid "7\tx"`},
		{status: "NSpid:\n", err: "empty NSpid line"},
	} {
		got, err := parseNSpid(c.status)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseNSpid(%q) = %v, %v; want an error with %q", c.status, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseNSpid(%q) = %v, %v; want %v", c.status, got, err, c.want)
		}
	}
}

func TestHostProcessRefusesANonPID1(t *testing.T) {
	// This test process is not PID 1 of a namespace: nothing can be
	// mapped through it (the negative control of the node's mapping).
	if _, err := HostProcess(os.Getpid(), 5); err == nil || !strings.Contains(err.Error(), "is not PID 1 of a PID namespace") {
		t.Fatalf("HostProcess(self, 5): %v; want a refusal", err)
	}
}

func TestDescendantsAndAlive(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := cmd.Process.Pid
	p, err := stamp(NodeProcess{PID: child, NodePID: child})
	if err != nil {
		t.Fatal(err)
	}
	pids, err := Descendants(os.Getpid())
	if err != nil || !slices.Contains(pids, child) {
		t.Fatalf("Descendants(self) = %v, %v; want the child %d among them", pids, err, child)
	}
	if !p.Alive() {
		t.Fatalf("the running child %d is not Alive", child)
	}
	if other := (NodeProcess{PID: child, StartTicks: p.StartTicks + 1}); other.Alive() {
		t.Errorf("a process with another start time than %d's is Alive: a reused PID would pass", child)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if p.Alive() {
		t.Errorf("the killed child %d is still Alive", child)
	}
}

func TestReadNodePID1(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadNodePID1(dir); err == nil {
		t.Error("ReadNodePID1 of a folder without node-pid1: no error")
	}
	for _, bad := range []string{"x\n", "1\n", "0"} {
		if err := os.WriteFile(dir+"/"+NodePID1File, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadNodePID1(dir); err == nil {
			t.Errorf("ReadNodePID1 of %q: no error", bad)
		}
	}
	if err := os.WriteFile(dir+"/"+NodePID1File, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, err := ReadNodePID1(dir); err != nil || pid != os.Getpid() {
		t.Errorf("ReadNodePID1 = %d, %v; want %d", pid, err, os.Getpid())
	}
}
