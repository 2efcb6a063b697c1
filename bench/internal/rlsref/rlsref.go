// Package rlsref builds and runs the reference rate limit service,
// envoyproxy/ratelimit, for benchmarks and differential tests: from its
// Go module at a pinned version, against a Redis on loopback, with a
// configuration directory of its YAML files.
package rlsref

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Module and Version pin the reference: envoyproxy/ratelimit's commit
// 3fb702589d36 (2026-01-22), the newest version the module mirror serves
// (newer commits are refused by it: "This module version is not
// available").
const (
	Module  = "github.com/envoyproxy/ratelimit"
	Version = "v1.4.1-0.20260122083618-3fb702589d36"
)

// SourceEnv names the environment variable that, set, is a checkout of
// envoyproxy/ratelimit that BuildReference builds instead of the pinned
// Version: newer commits than the module mirror serves (its wildcards
// anywhere in a value, quota mode's statuses, metadata).
const SourceEnv = "LIMITPROXY_RLSREF_SRC"

// Build installs the reference's service_cmd into dir and returns the
// binary's path. The error holds the go command's output.
func Build(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "install", Module+"/src/service_cmd@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s/src/service_cmd@%s: %v\n%s", Module, Version, err, bytes.TrimSpace(out.Bytes()))
	}
	return filepath.Join(dir, "service_cmd"), nil
}

// Reference is a built reference server: its binary, what it was built
// from, and the features of that source that change its answers.
type Reference struct {
	Bin      string
	Source   string // the source tree's directory
	Version  string // Version, or the source tree's
	Features Features
}

// Features are what a version of the reference does that older ones do
// not, read from its source.
type Features struct {
	// Wildcards: a '*' anywhere in a value is a wildcard (its commit
	// 6bcd4d2); without, only a trailing one.
	Wildcards bool
	// QuotaStatus: a quota over its limit is OVER_LIMIT in its status,
	// the call when every quota is (commit 05c08d0); without, OK.
	QuotaStatus bool
	// Metadata: a descriptor's metadata key (commit 3728d99); without, an
	// unknown key.
	Metadata bool
}

// BuildReference builds the reference into dir: the checkout named by
// SourceEnv when set, else the pinned Version from its Go module (Build);
// and reads its features from its source.
func BuildReference(ctx context.Context, dir string) (*Reference, error) {
	ref := &Reference{Version: Version}
	if src := os.Getenv(SourceEnv); src != "" {
		ref.Source, ref.Version = src, "source "+src
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "service_cmd"), "./src/service_cmd")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s=%s: go build ./src/service_cmd: %v\n%s", SourceEnv, src, err, bytes.TrimSpace(out))
		}
		ref.Bin = filepath.Join(dir, "service_cmd")
	} else {
		bin, err := Build(ctx, dir)
		if err != nil {
			return nil, err
		}
		ref.Bin = bin
		cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", Module+"@"+Version)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list -m %s@%s: %v", Module, Version, err)
		}
		ref.Source = string(bytes.TrimSpace(out))
	}
	cfg, err := os.ReadFile(filepath.Join(ref.Source, "src", "config", "config_impl.go"))
	if err != nil {
		return nil, err
	}
	svc, err := os.ReadFile(filepath.Join(ref.Source, "src", "service", "ratelimit.go"))
	if err != nil {
		return nil, err
	}
	ref.Features = Features{
		Wildcards:   bytes.Contains(cfg, []byte("wildcardMatch(")),
		QuotaStatus: bytes.Contains(svc, []byte("failedQuotaDescriptors")),
		Metadata:    bytes.Contains(cfg, []byte(`"metadata":`)),
	}
	return ref, nil
}

// Options configure one reference server.
type Options struct {
	Bin       string            // from Build
	Dir       string            // a directory of its own: the runtime tree and the log
	RedisAddr string            // host:port of a redis-server
	Configs   map[string][]byte // YAML files by name (one domain each)
	// MergeDomains sets MERGE_DOMAIN_CONFIG.
	MergeDomains bool
	// Wrap, when not empty, is a command that runs Bin as its last
	// argument and becomes it (exec), as taskset -c 1 does: Pid is then
	// the server's.
	Wrap []string
	// Env is more of its environment (settings: SHADOW_MODE=true, …),
	// after Env's.
	Env []string
}

// Server is a running reference server.
type Server struct {
	Addr string // its gRPC address
	Log  string // its output's file
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

// Start writes the configuration under o.Dir (RUNTIME_ROOT/ratelimit/
// config/), starts the server on free loopback ports (gRPC, HTTP, debug)
// with statsd off, and waits until its gRPC port accepts connections.
func Start(o Options) (*Server, error) {
	confDir := filepath.Join(o.Dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	for name, b := range o.Configs {
		if err := os.WriteFile(filepath.Join(confDir, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Log: filepath.Join(o.Dir, "ratelimit.log")}
	logf, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(o.Bin)
	if len(o.Wrap) > 0 {
		s.cmd = exec.Command(o.Wrap[0], append(o.Wrap[1:], o.Bin)...)
	}
	s.cmd.Env = append(append(os.Environ(), Env(o, ports)...), o.Env...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.done = make(chan struct{})
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) || s.exited() {
			s.Stop()
			log, _ := os.ReadFile(s.Log)
			return nil, fmt.Errorf("the reference did not listen on %s: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Env is the reference's environment for o: gRPC, HTTP and debug ports
// (in that order) on 127.0.0.1, the runtime directory, Redis over TCP,
// no statsd, no local cache.
func Env(o Options, ports []int) []string {
	return []string{
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"RUNTIME_ROOT=" + filepath.Join(o.Dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + o.RedisAddr,
		"LOCAL_CACHE_SIZE_IN_BYTES=0",
		"MERGE_DOMAIN_CONFIG=" + strconv.FormatBool(o.MergeDomains),
	}
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Pid is the server's process ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server by its PID and waits for it.
func (s *Server) Stop() {
	s.cmd.Process.Kill()
	<-s.done
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
