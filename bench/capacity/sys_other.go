//go:build !linux

package main

import (
	"os/exec"
	"time"
)

// pacer sleeps until given instants with Go's timers, which may wake a
// millisecond late; Linux's pacer (sys_linux.go) sleeps in the kernel.
type pacer struct{}

func newPacer() pacer { return pacer{} }

func (pacer) stop() {}

// sleepUntil returns at t or after it.
func (pacer) sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// dieWithParent does nothing: only Linux kills a child when its parent dies.
func dieWithParent(*exec.Cmd) {}

// raiseNoFile does nothing: Go raises the soft limit to the hard one at
// start on Unix systems, and that has to do.
func raiseNoFile(uint64) error { return nil }
