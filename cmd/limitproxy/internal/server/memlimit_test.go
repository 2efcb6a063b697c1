package server

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

func TestMemoryMaxConnections(t *testing.T) {
	for _, c := range []struct {
		limit, cost uint64
		want        int
	}{
		{1 << 30, costFront, 1 << 30 / 2 / costFront}, // 1 GiB: 131,072 plain connections
		{512 << 20, costTLS, 512 << 20 / 2 / costTLS}, // 512 MiB: 4,096 under TLS
		{1 << 20, costTLS, 8},
		{1000, costTLS, 1}, // at least one
		{math.MaxUint64, 1, 1 << 30},
		{1 << 20, 0, 1 << 19},
	} {
		if got := MemoryMaxConnections(c.limit, c.cost); got != c.want {
			t.Errorf("MemoryMaxConnections(%d, %d) = %d, want %d", c.limit, c.cost, got, c.want)
		}
	}
}

// fakeRoot writes files (path → content) under a new directory and
// returns it, as the root findMemoryLimit reads below.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The mountinfo lines of a cgroup v2 system, a v1 one (memory
// controller alone, and with another), and a hybrid one.
const (
	mountV2     = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
	mountV1     = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mountV1Pair = "35 31 0:32 / /sys/fs/cgroup/cpu,memory rw,relatime - cgroup cgroup rw,cpu,memory\n"
	mountOther  = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
	mountHybrid = mountOther + mountV1 + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)

func TestFindMemoryLimit(t *testing.T) {
	const none = math.MaxInt64 // GOMEMLIMIT unset
	for _, c := range []struct {
		name       string
		files      map[string]string
		goMemLimit int64
		want       uint64 // 0: no limit found
		source     string
	}{
		{"no cgroup files, no GOMEMLIMIT", nil, none, 0, ""},
		{"GOMEMLIMIT alone", nil, 3 << 30, 3 << 30, "GOMEMLIMIT"},
		{"v2: the process's cgroup", map[string]string{
			"proc/self/cgroup":    "0::/system.slice/limitproxy.service\n",
			"proc/self/mountinfo": mountOther + mountV2,
			"sys/fs/cgroup/system.slice/limitproxy.service/memory.max": "536870912\n",
			"sys/fs/cgroup/system.slice/memory.max":                    "max\n",
		}, none, 512 << 20, "/sys/fs/cgroup/system.slice/limitproxy.service/memory.max"},
		{"v2: a parent's lower limit bounds it", map[string]string{
			"proc/self/cgroup":    "0::/system.slice/limitproxy.service\n",
			"proc/self/mountinfo": mountV2,
			"sys/fs/cgroup/system.slice/limitproxy.service/memory.max": "max\n",
			"sys/fs/cgroup/system.slice/memory.max":                    "268435456\n",
		}, none, 256 << 20, "/sys/fs/cgroup/system.slice/memory.max"},
		{"v2: no limit anywhere", map[string]string{
			"proc/self/cgroup":                    "0::/user.slice\n",
			"proc/self/mountinfo":                 mountV2,
			"sys/fs/cgroup/user.slice/memory.max": "max\n",
		}, none, 0, ""},
		{"v2 in a container: its namespace's root", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      mountV2,
			"sys/fs/cgroup/memory.max": "1073741824\n",
		}, none, 1 << 30, "/sys/fs/cgroup/memory.max"},
		{"v2: GOMEMLIMIT lower", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      mountV2,
			"sys/fs/cgroup/memory.max": "1073741824\n",
		}, 600 << 20, 600 << 20, "GOMEMLIMIT"},
		{"v2: the cgroup lower than GOMEMLIMIT", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      mountV2,
			"sys/fs/cgroup/memory.max": "1073741824\n",
		}, 2 << 30, 1 << 30, "/sys/fs/cgroup/memory.max"},
		{"v1: memory.limit_in_bytes", map[string]string{
			"proc/self/cgroup":    "9:pids:/docker/abc\n4:memory:/docker/abc\n",
			"proc/self/mountinfo": mountOther + mountV1,
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
			"sys/fs/cgroup/memory/docker/memory.limit_in_bytes":     "9223372036854771712\n",
		}, none, 2 << 30, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"},
		{"v1: unlimited (the largest page-rounded value)", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"proc/self/mountinfo":                        mountV1,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, none, 0, ""},
		{"v1: memory mounted with another controller", map[string]string{
			"proc/self/cgroup":    "4:cpu,memory:/job\n",
			"proc/self/mountinfo": mountV1Pair,
			"sys/fs/cgroup/cpu,memory/job/memory.limit_in_bytes": "104857600\n",
		}, none, 100 << 20, "/sys/fs/cgroup/cpu,memory/job/memory.limit_in_bytes"},
		{"v1: a mount of a subtree (its root is the cgroup)", map[string]string{
			"proc/self/cgroup":                           "4:memory:/docker/abc\n",
			"proc/self/mountinfo":                        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "314572800\n",
		}, none, 300 << 20, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"hybrid: v1 memory limit, v2 without the memory controller", map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/x\n0::/\n",
			"proc/self/mountinfo": mountHybrid,
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "419430400\n",
		}, none, 400 << 20, "/sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes"},
		{"a cgroup file without a mount", map[string]string{
			"proc/self/cgroup":    "0::/x\n",
			"proc/self/mountinfo": mountOther,
		}, none, 0, ""},
		{"garbage in the limit file", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      mountV2,
			"sys/fs/cgroup/memory.max": "lots\n",
		}, none, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, ok := findMemoryLimit(fakeRoot(t, c.files), c.goMemLimit)
			if c.want == 0 {
				if ok {
					t.Errorf("limit %d from %s, want none", l.bytes, l.source)
				}
				return
			}
			if !ok || l.bytes != c.want || l.source != c.source {
				t.Errorf("limit %d from %q (found %v), want %d from %q", l.bytes, l.source, ok, c.want, c.source)
			}
		})
	}
}

// memPolicy is a configuration's upstream and policy, for a server that
// only starts.
const memPolicy = `[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "app"
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 1
`

// TestMaxConnectionsFromMemory: with max_connections = 0 and a memory
// limit known, the proxy listener's bound is the lower of the one the
// descriptors allow and the one the memory does, by who serves the
// connections, and the start logs which, with the limit and its source;
// a max_connections set is kept.
func TestMaxConnectionsFromMemory(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, server string
		limit        uint64
		want         int
		message      string
	}{
		{"front", "", 64 << 20, 64 << 20 / 2 / costFront, "connection bound derived from the memory limit"},
		{"net/http", `http1 = "net/http"`, 64 << 20, 64 << 20 / 2 / costNetHTTP, "connection bound derived from the memory limit"},
		{"ample memory", "", 1 << 50, DefaultMaxConnections(fileLimit()), "connection bound derived from the file-descriptor limit"},
		{"set", "max_connections = 77", 64 << 20, 77, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse("mem.toml", []byte(fmt.Sprintf("[server]\nlisten = \"127.0.0.1:0\"\n%s\n[admin]\nlisten = \"\"\n%s", c.server, memPolicy)))
			if err != nil {
				t.Fatal(err)
			}
			logs := &syncWriter{w: &bytes.Buffer{}}
			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan listening, 1)
			done := make(chan error, 1)
			var proc *process
			go func() {
				done <- serve(ctx, "", cfg, logs, ready, func(p *process) {
					proc = p
					p.memoryLimit = func() (memoryLimit, bool) { return memoryLimit{bytes: c.limit, source: "test"}, true }
				})
			}()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("serve: %v", err)
			}
			got := proc.ln.(*limitListener).max
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
			if got != int64(c.want) {
				t.Errorf("the proxy listener's bound is %d, want %d", got, c.want)
			}
			if c.message == "" {
				if strings.Contains(logs.String(), "connection bound derived") {
					t.Errorf("a bound derived though max_connections is set:\n%s", logs)
				}
				return
			}
			want := fmt.Sprintf(`"msg":%q,"listener":"proxy"`, c.message)
			if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), fmt.Sprintf(`"max_connections":%d`, c.want)) ||
				!strings.Contains(logs.String(), `"memory_limit_from":"test"`) {
				t.Errorf("the start's log does not say %s (%d connections, the limit from test):\n%s", want, c.want, logs)
			}
		})
	}
}
