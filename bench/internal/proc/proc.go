// Package proc holds what the benchmark commands share about processes:
// running nginx (on 127.0.0.1 only: a configuration of the caller's in a
// directory of its own, one worker process, no daemon, logs off), a
// process tree's CPU time from /proc (nginx's master and worker, or one of
// our proxies), free loopback ports and waiting for a listener, starting
// a process that dies with ours, and (pacer_linux.go) sleeping to an
// instant more precisely than Go's timers and raising the open-files
// limit.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Nginx is a running nginx. Stop it with Stop.
type Nginx struct {
	cmd *exec.Cmd
	dir string
}

// NginxPreamble is the start of every configuration: one worker, no access
// log, errors to stderr at "error" (limit_req's rejections are logged at
// "error" level by default; limit_req_log_level below moves them to
// "info" so that logging does not weigh on the 429 path), temporary
// files in the server's own directory. The caller appends its http block
// contents and closes it.
const NginxPreamble = `worker_processes 1;
error_log stderr error;
pid nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  fastcgi_temp_path tmp/fastcgi;
  uwsgi_temp_path tmp/uwsgi;
  scgi_temp_path tmp/scgi;
  limit_req_log_level info;
  limit_req_status 429;
`

// StartNginx runs nginx with conf (NginxPreamble, the caller's directives, and the
// closing brace of the http block) and waits until addr accepts
// connections. A wrap, if given, is a command nginx runs under (e.g.
// taskset -c 1).
func StartNginx(conf, addr string, wrap ...string) (*Nginx, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/nginx"); e != nil {
			return nil, errors.New("nginx is not installed (the bench scripts install it when run as root: apt-get install nginx)")
		}
		bin = "/usr/sbin/nginx"
	}
	dir, err := os.MkdirTemp("", "bench-nginx")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	// Workers run as the invoking user when it is not root; as root,
	// nginx would switch them to "nobody", who may not read dir.
	global := "daemon off;"
	if os.Getuid() == 0 {
		global += " user root;"
	}
	args := slices.Concat(wrap, []string{bin, "-p", dir, "-c", path, "-e", "stderr", "-g", global})
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Nginx{cmd: cmd, dir: dir}
	if err := WaitUp(addr); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Pid is the master process's.
func (s *Nginx) Pid() int { return s.cmd.Process.Pid }

// Stop stops the master (which stops its worker) and removes the
// directory.
func (s *Nginx) Stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(s.dir)
}

// FreeAddr returns a loopback address with a port free at the time.
func FreeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// WaitUp waits up to 10s for addr to accept a connection.
func WaitUp(addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not start listening", addr)
}

// Start runs a process of the caller's (under wrap, e.g. taskset -c 1),
// its stderr to ours, to be killed when this process ends (DieWithParent),
// and waits until addr accepts connections. If addr does not, Start kills
// the process, reaps it and returns WaitUp's error.
func Start(wrap []string, addr string, args ...string) (*exec.Cmd, error) {
	args = slices.Concat(wrap, args)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := WaitUp(addr); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	return cmd, nil
}

// LimitproxyConfig returns the start of a limitproxy configuration for the
// benchmarks: listening on listen, no admin listener, warnings only, no
// access log, RateLimit headers per headers ("draft", "none"...), and one
// upstream named "app" at upstream (host:port). Policies follow.
func LimitproxyConfig(listen, upstream, headers string) string {
	return limitproxyConfig(listen, upstream, headers, "warn", false)
}

// LimitproxyConfigAccessLog is LimitproxyConfig with [log] as limitproxy's
// defaults have it: level info and the access log on (a line per request,
// rejections included, through the server's batching writer to stderr).
func LimitproxyConfigAccessLog(listen, upstream, headers string) string {
	return limitproxyConfig(listen, upstream, headers, "info", true)
}

func limitproxyConfig(listen, upstream, headers, level string, access bool) string {
	return fmt.Sprintf(`[server]
listen = %q
rate_limit_headers = %q
[admin]
listen = ""
[log]
level = %q
access = %v
[[upstream]]
name = "app"
targets = ["http://%s"]
`, listen, headers, level, access, upstream)
}

// TokenBucketPolicy is a policy to append to LimitproxyConfig's
// configuration: "bench", on upstream "app", one token bucket keyed by
// client IP. Its verbs are the rate (%q, e.g. "1000/s") and the burst
// (%d).
const TokenBucketPolicy = `[[policy]]
name = "bench"
upstream = "app"
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = %q
  burst = %d
`

// LimitproxyCommand writes the configuration conf to confPath and returns
// the command, not started, that runs the limitproxy binary bin on it with
// its stderr (its log, the access log with it) appended to the file at
// logPath, and that file, which the caller closes once the process has
// ended. The log belongs in a directory other than confPath's: limitproxy
// watches its configuration's directory, and a log written there would
// wake its watcher at each write.
func LimitproxyCommand(bin, confPath, conf, logPath string) (*exec.Cmd, *os.File, error) {
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "-config", confPath)
	cmd.Stderr = f
	return cmd, f, nil
}

// OKUpstream returns a server for addr, not started, that answers every
// request 200 with a fixed small body ("ok\n", text/plain): the upstream
// the proxy benchmarks run in their own process.
func OKUpstream(addr string) *http.Server {
	return &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	})}
}

// StartOKUpstream starts an OKUpstream on a free loopback address (its
// Addr) and waits until it accepts connections. The caller stops it with
// Close.
func StartOKUpstream() (*http.Server, error) {
	up := OKUpstream(FreeAddr())
	go up.ListenAndServe()
	if err := WaitUp(up.Addr); err != nil {
		up.Close()
		return nil, err
	}
	return up, nil
}

// TicksPerSecond is USER_HZ on Linux, the unit of CPUTicks.
const TicksPerSecond = 100

// CPUTicks returns the user+system CPU time of pid and of all its
// descendants that are alive (nginx's worker, say), in clock ticks.
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	total := utime + stime
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		c, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(c)) {
			child, _ := strconv.Atoi(s)
			if n, err := CPUTicks(child); err == nil {
				total += n
			}
		}
	}
	return total, nil
}
