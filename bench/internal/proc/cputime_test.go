package proc

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
)

func TestCPUTimeOwnProcess(t *testing.T) {
	pid := os.Getpid()
	before, err := CPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	ticks0, err := CPUTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	busy0, _, err := MachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Spin until /proc/PID/stat counts 20 more ticks (200 ms of CPU),
	// however busy the machine.
	ticks1 := ticks0
	for ticks1 < ticks0+20 {
		for range 1_000_000 {
			sink++
		}
		if ticks1, err = CPUTicks(pid); err != nil {
			t.Fatal(err)
		}
	}
	after, err := CPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	busy1, _, err := MachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	// The same quantity as /proc/PID/stat's utime+stime, which rounds
	// down to ticks: the two may differ by a tick at each end.
	used := after - before
	fromTicks := time.Duration(ticks1-ticks0) * time.Second / TicksPerSecond
	if d := (used - fromTicks).Abs(); d > 3*time.Second/TicksPerSecond {
		t.Errorf("CPU clock %v against utime+stime %v", used, fromTicks)
	}
	// The machine was busy at least as long as this process, within a
	// tick per CPU at each end.
	if slack := time.Duration(2*runtime.NumCPU()) * time.Second / TicksPerSecond; busy1-busy0 < used-slack {
		t.Errorf("the machine was busy %v while this process used %v", busy1-busy0, used)
	}
}

// sink keeps the spinning loop from being optimised away.
var sink int

func TestCPUTimeAndTreeOfAnotherProcess(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// sh spins, then starts sleep as its child.
	cmd := exec.Command(sh, "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	var tree []int
	poll.Until(5*time.Second, func() bool { tree = Tree(pid); return len(tree) > 1 })
	if len(tree) != 2 || tree[0] != pid {
		t.Fatalf("Tree(%d) = %v, want the shell and its sleep", pid, tree)
	}
	used, err := CPUTime(tree...)
	if err != nil {
		t.Fatal(err)
	}
	if used <= 0 {
		t.Errorf("the shell's loop used %v of CPU time", used)
	}
	// Linux's pids stay below 2^22 (pid_max's limit).
	if _, err := CPUTime(1<<22 + 1); err == nil {
		t.Error("CPUTime of a process that cannot exist: no error")
	}
}
