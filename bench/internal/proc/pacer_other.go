//go:build !linux

package proc

import (
	"os/exec"
	"runtime"
	"time"
)

// Pacer sleeps until given instants with Go's timers, which may wake a
// millisecond late; Linux's Pacer (pacer_linux.go) sleeps in the kernel.
// NewPacer locks the calling goroutine to its thread and Stop unlocks it,
// as on Linux.
type Pacer struct{}

// NewPacer locks the calling goroutine to its thread.
func NewPacer() Pacer {
	runtime.LockOSThread()
	return Pacer{}
}

// Stop unlocks the goroutine from its thread.
func (Pacer) Stop() { runtime.UnlockOSThread() }

// SleepUntil returns at t or after it.
func (Pacer) SleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// DieWithParent does nothing: only Linux kills a child when its parent dies.
func DieWithParent(*exec.Cmd) {}

// RaiseNoFile does nothing: Go raises the soft limit to the hard one at
// start on Unix systems, and that has to do.
func RaiseNoFile(uint64) error { return nil }
