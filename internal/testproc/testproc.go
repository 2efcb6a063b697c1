// Package testproc answers, for tests that start server processes on
// ports chosen free a moment before, whether the process itself listens
// on its port: a port taken meanwhile by another process (another test's
// server) still answers a dial, so a dial alone does not tell. Linux
// only (it reads /proc); elsewhere ListensOn reports true once a dial
// would do.
package testproc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ListensOn reports whether process pid holds a TCP socket listening on
// port (IPv4 or IPv6), from /proc: the socket inodes of its descriptors
// against those /proc/net/tcp and tcp6 list in the LISTEN state (0A) on
// port. Safe for concurrent use.
func ListensOn(pid, port int) bool {
	listening := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				listening["socket:["+fs[9]+"]"] = true
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		// No /proc (not Linux): the caller's dial is all there is.
		_, statErr := os.Stat("/proc/self/fd")
		return statErr != nil
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && listening[l] {
			return true
		}
	}
	return false
}
