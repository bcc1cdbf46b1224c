package procfs

import (
	"os"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' of its own.
	line := "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 8 2 20 0 1 0 987654 1000 100"
	st, err := ParseStat("stat", []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{State: 'S', PPID: 1, PGRP: 4242, UTime: 17, STime: 5, CUTime: 8, CSTime: 2, StartTicks: 987654}
	if st != want {
		t.Errorf("ParseStat = %+v, want %+v", st, want)
	}
	if st.Gone() || st.CPUSeconds() != 0.22 || st.ChildrenCPUSeconds() != 0.1 {
		t.Errorf("Gone %v, CPUSeconds %v, ChildrenCPUSeconds %v", st.Gone(), st.CPUSeconds(), st.ChildrenCPUSeconds())
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2", strings.Replace(line, "987654", "x", 1)} {
		if _, err := ParseStat("stat", []byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() || st.StartTicks == 0 || st.Gone() {
		t.Errorf("own stat %+v, parent %d", st, os.Getppid())
	}
	if _, err := ReadStat(-1); err == nil {
		t.Error("ReadStat(-1) succeeded")
	}
}
