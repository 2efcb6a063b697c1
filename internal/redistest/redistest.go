// Package redistest starts real redis-server processes for tests: one
// node, a Redis Cluster of three masters (with or without a replica
// each), or Sentinels watching a master and its replica, on free loopback
// ports, each stopped by its PID when the test ends. It fails the test, with a clear
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
	var addrs []string
	for _, s := range cluster(t, 3, "2000", "--cluster-require-full-coverage", "yes") {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// Shard is a master of a test cluster and its replica.
type Shard struct{ Master, Replica *Server }

// ClusterReplicas starts a Redis Cluster of three masters with one
// replica each (--cluster-replicas 1), with a cluster-node-timeout of one
// second, so that a replica takes over about two seconds after its master
// dies, and cluster-require-full-coverage off, so that the healthy masters
// serve their slots meanwhile (with it on, every node answers CLUSTERDOWN
// from the moment the master is marked failed until its replica takes
// over). It returns the shards once every replica is in sync and every
// node sees the cluster ok.
func ClusterReplicas(t testing.TB) []Shard {
	t.Helper()
	nodes := cluster(t, 6, "1000", "--cluster-require-full-coverage", "no")
	byPort := map[int]*Server{}
	for _, s := range nodes {
		byPort[s.port] = s
	}
	var shards []Shard
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		for {
			info, _ := c.Info(context.Background(), "replication").Result()
			if contains(info, "role:master") {
				break
			}
			if contains(info, "master_link_status:up") {
				port, _ := strconv.Atoi(field(info, "master_port"))
				if m := byPort[port]; m != nil {
					shards = append(shards, Shard{Master: m, Replica: s})
					break
				}
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("%s: not a master nor a replica in sync after 20s: %s", s.Addr(), info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	if len(shards) != 3 {
		t.Fatalf("%d shards with a replica, want 3", len(shards))
	}
	return shards
}

// field returns the value of name in an INFO reply.
func field(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Role returns "master" or "slave" as the server reports it, or "" if it
// does not answer.
func (s *Server) Role() string {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	return field(info, "role")
}

// cluster starts n nodes in cluster mode with the given node timeout (ms)
// and extra arguments, and joins them, with a replica per master if n is
// 6.
func cluster(t testing.TB, n int, nodeTimeout string, extra ...string) []*Server {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is not installed: run `make test`, which installs redis-server (and redis-cli with it)")
	}
	var nodes []*Server
	var addrs []string
	for range n {
		s := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", nodeTimeout}, extra...)...)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	replicas := "0"
	if n == 6 {
		replicas = "1"
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", replicas, "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	// Every node must see the cluster as ok (each reaches that view on
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
	return nodes
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

// Sentinels is a master, its replica and three Sentinels watching them
// under the name Name (quorum 2, down-after-milliseconds 1000), so that
// the replica takes over a few seconds after the master dies.
type Sentinels struct {
	Master, Replica *Server
	Addrs           []string // the Sentinels'
	Name            string
}

// SentinelReplicas starts a Sentinels group and returns it once every
// Sentinel knows the replica and the two other Sentinels (it could not
// fail over before).
func SentinelReplicas(t testing.TB) *Sentinels {
	t.Helper()
	m := Start(t)
	r := Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(m.port))
	g := &Sentinels{Master: m, Replica: r, Name: "limitproxy"}
	bin, _ := exec.LookPath("redis-server")
	used := map[int]bool{m.port: true, r.port: true}
	for range 3 {
		dir := t.TempDir()
		port := freePort(t)
		for used[port] {
			port = freePort(t)
		}
		used[port] = true
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[3]s 1000\nsentinel failover-timeout %[3]s 10000\n", port, dir, g.Name, m.port)
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
		deadline := time.Now().Add(10 * time.Second)
		for sc.Ping(context.Background()).Err() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("sentinel on %s does not answer after 10s", addr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		sc.Close()
		g.Addrs = append(g.Addrs, addr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range g.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		for {
			peers, _ := sc.Sentinels(context.Background(), g.Name).Result()
			replicas, _ := sc.Replicas(context.Background(), g.Name).Result()
			if len(peers) == 2 && len(replicas) == 1 {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				t.Fatalf("sentinel %s knows %d sentinels and %d replicas after 20s, want 2 and 1", a, len(peers), len(replicas))
			}
			time.Sleep(50 * time.Millisecond)
		}
		sc.Close()
	}
	return g
}

// MasterAddr returns the master's address as the first Sentinel that
// answers reports it, or "".
func (g *Sentinels) MasterAddr() string {
	for _, a := range g.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(context.Background(), g.Name).Result()
		sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1])
		}
	}
	return ""
}
