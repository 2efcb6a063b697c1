package proc

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Go's own timers wake a sleeping goroutine up to a millisecond late (the
// runtime waits in epoll with a timeout in whole milliseconds), as much as
// the latency a benchmark measures. The Pacer sleeps in the kernel
// instead, on a thread the dispatcher holds (runtime.LockOSThread), with a
// timer slack of 1 ns instead of Linux's default 50 µs.
const (
	prSetTimerSlack = 29 // PR_SET_TIMERSLACK
	prGetTimerSlack = 30 // PR_GET_TIMERSLACK
)

// Pacer sleeps until given instants. NewPacer locks the calling goroutine
// to its thread and Stop unlocks it: both must run on the same goroutine.
type Pacer struct{ slack uintptr }

// NewPacer locks the calling goroutine to its thread and sets the
// thread's timer slack to 1 ns.
func NewPacer() Pacer {
	runtime.LockOSThread()
	slack, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerSlack, 0, 0)
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	return Pacer{slack: slack}
}

// Stop restores the thread's timer slack and unlocks the goroutine from
// it.
func (p Pacer) Stop() {
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, p.slack, 0)
	runtime.UnlockOSThread()
}

// SleepUntil returns at t or just after it (at once if t has passed).
func (Pacer) SleepUntil(t time.Time) {
	for d := time.Until(t); d > 0; d = time.Until(t) {
		ts := syscall.NsecToTimespec(int64(d))
		syscall.Nanosleep(&ts, nil)
	}
}

// DieWithParent has cmd killed if this process dies before stopping it.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// RaiseNoFile makes sure this process may open n files: it raises the
// soft RLIMIT_NOFILE up to the hard one if needed (Go raises it to the
// hard one at start already), and fails if even that is too low.
func RaiseNoFile(n uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= n {
		return nil
	}
	if l.Max < n {
		return fmt.Errorf("RLIMIT_NOFILE: %d files needed, the hard limit is %d (raise it: ulimit -Hn)", n, l.Max)
	}
	l.Cur = n
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}
