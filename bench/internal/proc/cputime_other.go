//go:build !linux

package proc

import (
	"errors"
	"time"
)

// CPUTime reads processes' CPU clocks on Linux only.
func CPUTime(pids ...int) (time.Duration, error) {
	return 0, errors.New("CPU time of another process: Linux only")
}

// Tree returns pid alone: descendants are found through Linux's /proc.
func Tree(pid int) []int { return []int{pid} }

// MachineCPU reads Linux's /proc/stat only.
func MachineCPU() (busy, steal time.Duration, err error) {
	return 0, 0, errors.New("the machine's CPU time: Linux only")
}
