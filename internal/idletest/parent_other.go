//go:build !linux

package idletest

import "os/exec"

// dieWithParent: Linux only; elsewhere Hold's cleanup stops the child.
func dieWithParent(*exec.Cmd) {}
