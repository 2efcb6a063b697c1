// Package redistest starts real redis-server processes for tests: one
// node, or a Redis Cluster of three masters, on free loopback ports, each
// stopped by its PID when the test ends. It fails the test, with a clear
// message, when redis-server is not installed (`make test` installs it).
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server of a test's own. Its methods must be called
// from the test's goroutine.
type Server struct {
	t     testing.TB
	bin   string
	port  int
	dir   string
	extra []string
	cmd   *exec.Cmd
}

// Start starts a redis-server (with extra command-line arguments) on a
// free loopback port, without persistence, and waits until it answers.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: run `make test`, which installs it (apt-get install redis-server)")
	}
	s := &Server{t: t, bin: bin, port: freePort(t), dir: t.TempDir(), extra: extra}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Addr returns host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Restart starts the server again on its port (after Kill), empty.
func (s *Server) Restart() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir}, s.extra...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer within 10s", s.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server at once, by its PID.
func (s *Server) Kill() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// Cluster starts three redis-server masters in cluster mode, joins them
// with redis-cli --cluster create, waits until the cluster is ok, and
// returns their addresses.
func Cluster(t testing.TB) []string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is not installed: run `make test`, which installs redis-server (and redis-cli with it)")
	}
	var addrs []string
	for range 3 {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr())
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	// Every master must see the cluster as ok (each reaches that view on
	// its own), and writes to keys of every slot range must go through.
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, _ := c.ClusterInfo(context.Background()).Result()
			if contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("%s: the cluster is not ok after 20s: %s", a, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	for i := 0; i < 30; {
		if err := cc.Set(context.Background(), "probe-"+strconv.Itoa(i), 1, time.Second).Err(); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("the cluster does not take writes after 20s: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		i++
	}
	return addrs
}

// Sentinel starts a master and one Sentinel monitoring it under the name
// "limitproxy", and returns the Sentinel's address and the master's name.
func Sentinel(t testing.TB) (sentinel, master string) {
	t.Helper()
	m := Start(t)
	bin, _ := exec.LookPath("redis-server")
	dir := t.TempDir()
	port := freePort(t)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor limitproxy 127.0.0.1 %d 1\nsentinel down-after-milliseconds limitproxy 5000\n", port, dir, m.port)
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, path, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a, err := sc.GetMasterAddrByName(context.Background(), "limitproxy").Result(); err == nil && len(a) == 2 {
			return addr, "limitproxy"
		}
		if time.Now().After(deadline) {
			t.Fatal("the sentinel does not know the master after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(fmt.Errorf("free port: %w", err))
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
