package server

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// What a client connection costs, for the connection bound derived from
// a memory limit (MemoryMaxConnections): the resident memory an idle
// connection holds, measured (BENCHMARKS.md, "Memory per idle
// connection", bench/idle.sh) and rounded up, by who serves it. A
// connection in the middle of a request holds more (its buffers, a
// goroutine and its stack); the half of the limit the bound leaves
// (memoryShare) is for that, the store and the garbage collector's
// headroom.
const (
	// costFront is a plain HTTP/1.1 connection of the front
	// (internal/h1), parked past a second of idleness: no goroutine, no
	// buffer (measured 0.7-2.6 KiB settled, up to 10 KiB right after a
	// burst of connections, until the collector gives it back).
	costFront = 4 << 10
	// costNetHTTP is a plain HTTP/1.1 connection of net/http's server
	// ([server] http1 = "net/http", the forward-auth listener): a
	// goroutine, its stack the handler grew, its 4 KiB read and write
	// buffers (a bare ReverseProxy: 23 KiB).
	costNetHTTP = 32 << 10
	// costTLS is a connection under TLS, HTTP/1.1 or HTTP/2 (net/http's
	// server, crypto/tls's buffers and cipher states; HTTP/2's two
	// goroutines and header tables: 35-50 KiB right after, 12-46
	// settled), and Envoy's gRPC connections.
	costTLS = 64 << 10
)

// memoryShare is the part of the memory limit one listener's
// connections may take: 1/memoryShare. Half: the other half holds
// connections in the middle of a request, the store's keys, and the
// heap the garbage collector lets grow past the live one (by default as
// much again: GOGC=100) before it collects.
const memoryShare = 2

// MemoryMaxConnections returns the bound on a listener's client
// connections that a memory limit of limit bytes allows when each costs
// cost bytes: limit / memoryShare / cost, at least 1 and at most 1<<30.
func MemoryMaxConnections(limit, cost uint64) int {
	if cost == 0 {
		cost = 1
	}
	return int(max(1, min(limit/memoryShare/cost, 1<<30)))
}

// memoryLimit is a limit on the process's memory and where it was found.
type memoryLimit struct {
	bytes  uint64
	source string // "GOMEMLIMIT", or the cgroup file
}

// findMemoryLimit returns the lowest limit on the process's memory that
// it knows: goMemLimit (GOMEMLIMIT, as runtime/debug.SetMemoryLimit(-1)
// reports it; math.MaxInt64 means none) and the memory cgroup's
// (cgroupMemoryLimit, read under root: "/" but in tests). false: none.
func findMemoryLimit(root string, goMemLimit int64) (memoryLimit, bool) {
	best, ok := memoryLimit{}, false
	if goMemLimit > 0 && goMemLimit != math.MaxInt64 {
		best, ok = memoryLimit{bytes: uint64(goMemLimit), source: "GOMEMLIMIT"}, true
	}
	if l, found := cgroupMemoryLimit(root); found && (!ok || l.bytes < best.bytes) {
		best, ok = l, true
	}
	return best, ok
}

// unlimitedV1 is where cgroup v1 memory.limit_in_bytes values mean "no
// limit" (the largest int64, rounded down to a page: 9223372036854771712).
const unlimitedV1 = 1 << 62

// cgroupMemoryLimit returns the limit of the memory cgroup the process
// is in, read from the files under root: its cgroup from
// /proc/self/cgroup, where its hierarchy is mounted from
// /proc/self/mountinfo, then the lowest limit on the path from its
// cgroup up to the mount's root (a parent's limit bounds its children):
// memory.max in cgroup v2 ("max": none), memory.limit_in_bytes in v1.
// Both are read where both are mounted (a hybrid system), and the lower
// one wins. false: no limit found.
func cgroupMemoryLimit(root string) (memoryLimit, bool) {
	cg, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return memoryLimit{}, false
	}
	mounts, err := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return memoryLimit{}, false
	}
	best, ok := memoryLimit{}, false
	consider := func(l memoryLimit, found bool) {
		if found && (!ok || l.bytes < best.bytes) {
			best, ok = l, true
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(cg))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2's is 0::path.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if mnt, mroot, found := cgroupMount(mounts, "cgroup2", ""); found {
				consider(readCgroupLimit(root, mnt, mroot, parts[2], "memory.max"))
			}
		case hasField(parts[1], "memory"):
			if mnt, mroot, found := cgroupMount(mounts, "cgroup", "memory"); found {
				consider(readCgroupLimit(root, mnt, mroot, parts[2], "memory.limit_in_bytes"))
			}
		}
	}
	return best, ok
}

// cgroupMount returns the mount point and root of the mount of fstype
// (with option opt among its super options, if not "") in mountinfo.
func cgroupMount(mountinfo []byte, fstype, opt string) (mountPoint, mountRoot string, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional…] - fstype source super-options
		pre, post, found := strings.Cut(sc.Text(), " - ")
		if !found {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 || g[0] != fstype {
			continue
		}
		if opt != "" && (len(g) < 3 || !hasField(g[2], opt)) {
			continue
		}
		return f[4], f[3], true
	}
	return "", "", false
}

// readCgroupLimit reads file in the directory of cgroup cgPath (as
// /proc/self/cgroup names it) and in each of its parents up to the
// mount's, under root, and returns the lowest limit.
func readCgroupLimit(root, mountPoint, mountRoot, cgPath, file string) (memoryLimit, bool) {
	rel := cgPath
	if mountRoot != "/" {
		var found bool
		if rel, found = strings.CutPrefix(cgPath, mountRoot); !found || (rel != "" && rel[0] != '/') {
			return memoryLimit{}, false // not under what is mounted
		}
	}
	best, ok := memoryLimit{}, false
	for dir := path.Clean("/" + rel); ; dir = path.Dir(dir) {
		p := filepath.Join(root, mountPoint, dir, file)
		if b, err := os.ReadFile(p); err == nil {
			s := strings.TrimSpace(string(b))
			if n, err := strconv.ParseUint(s, 10, 64); err == nil && n < unlimitedV1 && (!ok || n < best.bytes) {
				best, ok = memoryLimit{bytes: n, source: filepath.Join(mountPoint, dir, file)}, true
			}
		}
		if dir == "/" {
			return best, ok
		}
	}
}

// hasField reports whether the comma-separated list s holds f.
func hasField(s, f string) bool {
	for v := range strings.SplitSeq(s, ",") {
		if v == f {
			return true
		}
	}
	return false
}
