// Package redistest starts real redis-server processes for tests: one
// node, a Redis Cluster of three masters (with or without a replica
// each), or Sentinels watching a master and its replica, on free loopback
// ports, each stopped by its PID when the test ends (or, for the cluster
// SharedCluster starts, when StopShared is called). It fails the test,
// with a clear message, when redis-server is not installed (`make test`
// installs it).
//
// A server that exits while starting (its port taken meanwhile by another
// process, or a cluster bus port past 65535) is started again on another
// port; one that does not come up fails the test with the end of its log.
package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// upWithin bounds how long a redis-server may take to answer its first
// PING. It starts in milliseconds; the bound is for a machine at a load
// of tens of runnable threads per core, where a process may wait long
// for its first time slice.
const upWithin = 20 * time.Second

// Server is one redis-server of a test's own. Its methods must be called
// from the test's goroutine.
type Server struct {
	t      testing.TB // nil for a shared server
	bin    string
	port   int
	dir    string
	extra  []string
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
}

// Start starts a redis-server (with extra command-line arguments) on a
// free loopback port, without persistence, and waits until it answers.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s, err := start(context.Background(), lookPath(t, "redis-server"), t.TempDir(), extra)
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.Kill)
	return s
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: run `make test`, which installs it (apt-get install redis-server)", name)
	}
	return bin
}

// start starts a server in dir, on a new free port each time it fails to
// come up, at most five times, unless ctx ends.
func start(ctx context.Context, bin, dir string, extra []string) (*Server, error) {
	bus := slices.Contains(extra, "--cluster-enabled")
	var errs []error
	for range 5 {
		port, err := freePort(bus)
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, port: port, dir: dir, extra: extra}
		if err := s.launch(ctx); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return s, nil
	}
	return nil, errors.Join(errs...)
}

// launch starts the process on s.port and waits until it answers PING.
// If it exits first, or does not answer within upWithin (or before ctx
// ends), it returns an error with the end of its log.
func (s *Server) launch(ctx context.Context) error {
	logPath := filepath.Join(s.dir, "redis.log")
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", logPath}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(upWithin)
	for {
		// Whoever answers must be this process: the port was free when
		// freePort closed it, but another test's server may have taken
		// it since (and this one then fails to bind it, and exits).
		if info, err := c.Info(ctx, "server").Result(); err == nil && field(info, "process_id") == strconv.Itoa(cmd.Process.Pid) {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("redis-server on %s exited while starting: %s", s.Addr(), logTail(logPath))
		case <-ctx.Done():
			s.Kill()
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer within %v: %s", s.Addr(), upWithin, logTail(logPath))
		}
	}
}

// logTail returns the last lines of a server's log.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-5):], []byte("\n")))
}

// Addr returns host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// createWithin bounds redis-cli --cluster create (a loaded machine takes
// seconds; a cluster that never forms fails the test instead of hanging).
const createWithin = 60 * time.Second

// Restart starts the server again on its port (after Kill), empty. If the
// port was taken meanwhile, it tries again for up to upWithin.
func (s *Server) Restart() {
	s.t.Helper()
	deadline := time.Now().Add(upWithin)
	for {
		err := s.launch(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the server at once, by its PID.
func (s *Server) Kill() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
	}
}

// Cluster starts three redis-server masters in cluster mode, joins them
// with redis-cli --cluster create, waits until the cluster is ok, and
// returns their addresses. A test that only decides on keys and prefixes
// of its own, and changes nothing else, should use SharedCluster.
func Cluster(t testing.TB) []string {
	t.Helper()
	nodes, err := cluster(context.Background(), lookPath(t, "redis-server"), lookPath(t, "redis-cli"), ownedBy(t), 3, 2*time.Second,
		"--cluster-require-full-coverage", "yes")
	if err != nil {
		t.Fatal(err)
	}
	return addrsOf(nodes)
}

func addrsOf(nodes []*Server) []string {
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// shared is the cluster SharedCluster starts once per test binary.
var shared struct {
	once   sync.Once
	done   chan struct{} // closed once addrs or err is set
	cancel context.CancelFunc
	addrs  []string
	err    error
	stop   []func() // StopShared's, in the order to undo
}

// StartShared starts the cluster SharedCluster returns in the background,
// if it is not started yet: a TestMain may call it before m.Run, so that
// the tests that run first, one at a time, do not wait for it.
func StartShared() {
	shared.once.Do(func() {
		shared.done = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		shared.cancel = cancel
		go func() {
			defer close(shared.done)
			o := owner{
				tempDir: func() (string, error) {
					d, err := os.MkdirTemp("", "redistest-shared-")
					if err == nil {
						shared.stop = append(shared.stop, func() { os.RemoveAll(d) })
					}
					return d, err
				},
				cleanup: func(f func()) { shared.stop = append(shared.stop, f) },
			}
			bin, err := exec.LookPath("redis-server")
			if err != nil {
				shared.err = fmt.Errorf("redis-server is not installed: run `make test`, which installs it (apt-get install redis-server): %w", err)
				return
			}
			cli, err := exec.LookPath("redis-cli")
			if err != nil {
				shared.err = fmt.Errorf("redis-cli is not installed: run `make test`, which installs it (apt-get install redis-server): %w", err)
				return
			}
			nodes, err := cluster(ctx, bin, cli, o, 3, 2*time.Second, "--cluster-require-full-coverage", "yes")
			if err != nil {
				shared.err = fmt.Errorf("the shared cluster: %w", err)
				return
			}
			shared.addrs = addrsOf(nodes)
		}()
	})
}

// SharedCluster returns the addresses of a Redis Cluster of three masters
// (as Cluster's) that every test of the binary calling it shares: the
// first call starts it, if StartShared has not (a couple of seconds, most
// of it Redis's own delay before a master takes writes), and every call
// waits for it. Tests on it must use keys and prefixes of their own, and
// change nothing else: no slot moved, no node killed, nothing flushed.
// The package's TestMain must call StopShared after m.Run.
func SharedCluster(t testing.TB) []string {
	t.Helper()
	StartShared()
	<-shared.done
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.addrs
}

// Prefix returns a key prefix of t's own for a store on the shared
// cluster, "lp:NAME:N:": NAME is t.Name() and N counts the tests of that
// name this process has run (go test -count), so that a test run again
// finds none of its earlier run's keys. Every call for one t returns the
// same prefix (a store restarted on it, two instances sharing it).
func Prefix(t testing.TB) string {
	t.Helper()
	prefixes.mu.Lock()
	defer prefixes.mu.Unlock()
	if p, ok := prefixes.of[t]; ok {
		return p
	}
	if prefixes.of == nil {
		prefixes.of, prefixes.runs = map[testing.TB]string{}, map[string]int{}
	}
	n := prefixes.runs[t.Name()]
	prefixes.runs[t.Name()] = n + 1
	p := "lp:" + t.Name() + ":" + strconv.Itoa(n) + ":"
	prefixes.of[t] = p
	t.Cleanup(func() {
		prefixes.mu.Lock()
		delete(prefixes.of, t)
		prefixes.mu.Unlock()
	})
	return p
}

// prefixes are Prefix's: the prefix of each test running, and how many
// tests of each name have run.
var prefixes struct {
	mu   sync.Mutex
	of   map[testing.TB]string
	runs map[string]int
}

// StopShared stops the cluster SharedCluster started, if any (its start
// too, if no test waited for it), and removes its files. Call it from
// TestMain after m.Run, once.
func StopShared() {
	if shared.done == nil {
		return
	}
	shared.cancel()
	<-shared.done
	for _, f := range slices.Backward(shared.stop) {
		f()
	}
	shared.stop = nil
}

// owner is who stops a cluster's nodes and removes their files: a test,
// or StopShared.
type owner struct {
	tempDir func() (string, error)
	cleanup func(func())
}

func ownedBy(t testing.TB) owner {
	return owner{tempDir: func() (string, error) { return t.TempDir(), nil }, cleanup: t.Cleanup}
}

// Shard is a master of a test cluster and its replica.
type Shard struct{ Master, Replica *Server }

// ClusterReplicas starts a Redis Cluster of three masters with one
// replica each (--cluster-replicas 1), with the given
// cluster-node-timeout, and cluster-require-full-coverage off, so that
// the healthy masters serve their slots meanwhile (with it on, every node
// answers CLUSTERDOWN from the moment the master is marked failed until
// its replica takes over). A replica takes over about twice the node
// timeout after its master dies; a master that does not answer its peers
// for the node timeout (busy with a long script) is taken for dead too,
// so a test whose scripts run long needs a node timeout well above them.
// It returns the shards once every replica is in sync and every node sees
// the cluster ok.
func ClusterReplicas(t testing.TB, nodeTimeout time.Duration) []Shard {
	t.Helper()
	// Each master sends its replica its data at once rather than after
	// repl-diskless-sync-delay (5s, waiting for more replicas).
	nodes, err := cluster(context.Background(), lookPath(t, "redis-server"), lookPath(t, "redis-cli"), ownedBy(t), 6, nodeTimeout,
		"--cluster-require-full-coverage", "no",
		"--repl-diskless-sync-delay", "0")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		s.t = t
	}
	byPort := map[int]*Server{}
	for _, s := range nodes {
		byPort[s.port] = s
	}
	var shards []Shard
	deadline := time.Now().Add(upWithin)
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
				t.Fatalf("%s: not a master nor a replica in sync after %v: %s", s.Addr(), upWithin, info)
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

// cluster starts n nodes in cluster mode with the given node timeout and
// extra arguments, and joins them, with a replica per master if n is 6.
// Each node started is stopped by o, whatever the outcome. It gives up
// when ctx ends.
func cluster(ctx context.Context, bin, cli string, o owner, n int, nodeTimeout time.Duration, extra ...string) ([]*Server, error) {
	var nodes []*Server
	var addrs []string
	for range n {
		dir, err := o.tempDir()
		if err != nil {
			return nil, err
		}
		s, err := start(ctx, bin, dir, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10)}, extra...))
		if err != nil {
			return nil, err
		}
		o.cleanup(s.Kill)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	replicas := "0"
	if n == 6 {
		replicas = "1"
	}
	// redis-cli waits for the nodes to agree with no bound of its own: a
	// node that never joins would hold the test until go test's timeout.
	cctx, cancel := context.WithTimeout(ctx, createWithin)
	defer cancel()
	out, err := exec.CommandContext(cctx, cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", replicas, "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	// Every node must see the cluster as ok (each reaches that view on
	// its own, a master no sooner than two seconds after it started), and
	// writes to keys of every slot range must go through.
	deadline := time.Now().Add(upWithin)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, _ := c.ClusterInfo(context.Background()).Result()
			if contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				return nil, ctx.Err()
			}
			if time.Now().After(deadline) {
				c.Close()
				return nil, fmt.Errorf("%s: the cluster is not ok after %v: %s", a, upWithin, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	for i := 0; i < 30; {
		if err := cc.Set(ctx, "probe-"+strconv.Itoa(i), 1, time.Second).Err(); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("the cluster does not take writes after %v: %w", upWithin, err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		i++
	}
	return nodes, nil
}

// Sentinel starts a master and one Sentinel monitoring it under the name
// "limitproxy", and returns the Sentinel's address and the master's name.
func Sentinel(t testing.TB) (sentinel, master string) {
	t.Helper()
	m := Start(t)
	port := freePortT(t)
	conf := fmt.Sprintf("sentinel monitor limitproxy 127.0.0.1 %d 1\nsentinel down-after-milliseconds limitproxy 5000\n", m.port)
	addr := startSentinel(t, port, conf)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	deadline := time.Now().Add(upWithin)
	for {
		if a, err := sc.GetMasterAddrByName(context.Background(), "limitproxy").Result(); err == nil && len(a) == 2 {
			return addr, "limitproxy"
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel does not know the master after %v", upWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startSentinel starts a Sentinel on port with conf (after its port, bind
// and dir lines), stopped when the test ends, and waits until it answers.
func startSentinel(t testing.TB, port int, conf string) string {
	t.Helper()
	bin := lookPath(t, "redis-server")
	dir := t.TempDir()
	path := filepath.Join(dir, "sentinel.conf")
	logPath := filepath.Join(dir, "sentinel.log")
	conf = fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n", port, dir, logPath) + conf
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, path, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// A client of the Sentinel's, to read INFO: whoever answers must be
	// this process (see launch).
	sc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(upWithin)
	ours := func() bool {
		info, err := sc.Info(context.Background(), "server").Result()
		return err == nil && field(info, "process_id") == strconv.Itoa(cmd.Process.Pid)
	}
	for !ours() {
		select {
		case <-exited:
			t.Fatalf("sentinel on %s exited while starting: %s", addr, logTail(logPath))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not answer after %v: %s", addr, upWithin, logTail(logPath))
		}
	}
	return addr
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// freePort returns a loopback port nobody listens on. With bus, it also
// leaves room for a cluster node's bus port (its port + 10,000, which
// must be free and at most 65,535).
func freePort(bus bool) (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if !bus {
			ln.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			ln.Close()
			continue
		}
		bl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		ln.Close()
		if err != nil {
			continue
		}
		bl.Close()
		return port, nil
	}
	return 0, errors.New("free port: no port with a free cluster bus port after 100 tries")
}

func freePortT(t testing.TB) int {
	t.Helper()
	port, err := freePort(false)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Sentinels is a master, its replica and three Sentinels watching them
// under the name Name (quorum 2, down-after-milliseconds 1000), so that
// the replica takes over a few seconds after the master dies.
type Sentinels struct {
	Master, Replica *Server
	Addrs           []string // the Sentinels'
	Name            string
}

// SentinelReplicas starts a Sentinels group and returns it once the
// replica is in sync and every Sentinel knows the replica and the two
// other Sentinels (it could not fail over before). Each Sentinel's
// configuration names the others and the replica, so that they need not
// discover them (Sentinels announce themselves every two seconds).
func SentinelReplicas(t testing.TB) *Sentinels {
	t.Helper()
	// A master waits repl-diskless-sync-delay (5s) before it sends the
	// replica its data, in case more replicas come: none will.
	m := Start(t, "--repl-diskless-sync-delay", "0")
	r := Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(m.port))
	g := &Sentinels{Master: m, Replica: r, Name: "limitproxy"}
	used := map[int]bool{m.port: true, r.port: true}
	var ports []int
	var ids []string
	for range 3 {
		port := freePortT(t)
		for used[port] {
			port = freePortT(t)
		}
		used[port] = true
		var id [20]byte
		rand.Read(id[:])
		ports, ids = append(ports, port), append(ids, hex.EncodeToString(id[:]))
	}
	for i, port := range ports {
		conf := fmt.Sprintf("sentinel myid %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[2]s 1000\nsentinel failover-timeout %[2]s 10000\n"+
			"sentinel known-replica %[2]s 127.0.0.1 %[4]d\n", ids[i], g.Name, m.port, r.port)
		for j := range ports {
			if j != i {
				conf += fmt.Sprintf("sentinel known-sentinel %s 127.0.0.1 %d %s\n", g.Name, ports[j], ids[j])
			}
		}
		g.Addrs = append(g.Addrs, startSentinel(t, port, conf))
	}
	deadline := time.Now().Add(upWithin)
	rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
	for {
		info, _ := rc.Info(context.Background(), "replication").Result()
		if contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			rc.Close()
			t.Fatalf("the replica is not in sync after %v: %s", upWithin, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc.Close()
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
				t.Fatalf("sentinel %s knows %d sentinels and %d replicas after %v, want 2 and 1: %v (replica %s)", a, len(peers), len(replicas), upWithin, replicas, r.Addr())
			}
			time.Sleep(20 * time.Millisecond)
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
