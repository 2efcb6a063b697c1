package idletest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has cmd killed if the test process dies first.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
