package main

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Go's own timers wake a sleeping goroutine up to a millisecond late (the
// runtime waits in epoll with a timeout in whole milliseconds). The pacer
// sleeps in the kernel instead, on a thread the dispatcher holds
// (runtime.LockOSThread), with a timer slack of 1 ns instead of Linux's
// default 50 µs, as bench/openloop's.
const (
	prSetTimerSlack = 29 // PR_SET_TIMERSLACK
	prGetTimerSlack = 30 // PR_GET_TIMERSLACK
)

// pacer sleeps until given instants; newPacer and stop must run on the
// same locked thread.
type pacer struct{ slack uintptr }

func newPacer() pacer {
	slack, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerSlack, 0, 0)
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	return pacer{slack: slack}
}

// stop restores the thread's timer slack.
func (p pacer) stop() {
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, p.slack, 0)
}

// sleepUntil returns at t or just after it (at once if t has passed).
func (pacer) sleepUntil(t time.Time) {
	for d := time.Until(t); d > 0; d = time.Until(t) {
		ts := syscall.NsecToTimespec(int64(d))
		syscall.Nanosleep(&ts, nil)
	}
}

// dieWithParent has cmd killed if capacity dies before stopping it.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// raiseNoFile makes sure this process may open n files: it raises the
// soft RLIMIT_NOFILE up to the hard one if needed (Go raises it to the
// hard one at start already), and fails if even that is too low.
func raiseNoFile(n uint64) error {
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
