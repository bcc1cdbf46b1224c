package cpupin

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLowestPinsEveryThread(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	defer func() {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				_ = unix.SchedSetaffinity(tid, &before)
			}
		}
	}()
	cpu, err := Lowest()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cpu; i++ {
		if before.IsSet(i) {
			t.Fatalf("pinned to CPU %d, but CPU %d was allowed and is lower", cpu, i)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err != nil {
			continue
		}
		if got.Count() != 1 || !got.IsSet(cpu) {
			t.Errorf("thread %d: affinity has %d CPUs, want only CPU %d", tid, got.Count(), cpu)
		}
	}
}
