package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// CPUTime returns the CPU time, user and system, that the processes pids
// have used so far, each with all its threads (alive or ended), to the
// nanosecond. It is the sum that /proc/PID/stat splits into utime and
// stime and rounds down to ticks of 10 ms (CPUTicks), read instead from
// each process's CPU clock: clock_gettime(2) with the clock that
// clock_getcpuclockid(3) gives for the pid, which Linux lets any process
// read. Over a run of a few seconds, 10 ms ticks are too coarse for a
// cost of microseconds per request.
func CPUTime(pids ...int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		var ts syscall.Timespec
		if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, uintptr(processCPUClock(pid)), uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
			return 0, fmt.Errorf("CPU clock of process %d: %w", pid, errno)
		}
		total += time.Duration(ts.Nano())
	}
	return total, nil
}

// processCPUClock is the kernel's make_process_cpuclock(pid,
// CPUCLOCK_SCHED): the clock of all of pid's threads' time on a CPU.
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return int32(^uint32(pid)<<3 | cpuclockSched)
}

// MachineCPU returns the CPU time that everything on the machine has
// used since it started, on all its CPUs (busy: user, nice, system, irq
// and softirq of /proc/stat's first line), and the time the hypervisor
// ran something else while the machine's virtual CPUs had work (steal),
// to a tick. Busy time less that of one's own processes over the same
// span is what other work on the machine took.
func MachineCPU() (busy, steal time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks [9]int64
	for i := 1; i < 9; i++ { // user nice system idle iowait irq softirq steal
		if ticks[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	tick := time.Second / TicksPerSecond
	return time.Duration(ticks[1]+ticks[2]+ticks[3]+ticks[6]+ticks[7]) * tick, time.Duration(ticks[8]) * tick, nil
}

// Tree returns pid followed by its descendants that are alive (nginx's
// master, then its worker), for CPUTime.
func Tree(pid int) []int {
	pids := []int{pid}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		c, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(c)) {
			if child, err := strconv.Atoi(s); err == nil {
				pids = append(pids, Tree(child)...)
			}
		}
	}
	return pids
}
