package redisstore_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"limitproxy/limiter"
	"limitproxy/limiter/limitertest"
	"limitproxy/limiter/memstore"
	"limitproxy/limiter/redisstore"
)

// server is a redis-server of a test's own on a loopback port, which the
// test can kill and start again on the same port; it is stopped by PID
// when the test ends. A missing redis-server is a failure: `make test`
// installs it.
type server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start(extra ...string) {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir}, extra...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.t.Fatal("redis-server did not answer within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *server) kill() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

func newServer(t testing.TB, extra ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: run `make test`, which installs it (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{t: t, bin: bin, port: port, dir: t.TempDir()}
	s.start(extra...)
	t.Cleanup(s.kill)
	return s
}

// startRedis starts a server and returns a client of it.
func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: newServer(t).addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

func newStore(t testing.TB, c redis.UniversalClient, o redisstore.Options) *redisstore.Store {
	t.Helper()
	if o.OnError == "" {
		o.OnError = "deny" // a test must see Redis fail, not a fallback
	}
	s, err := redisstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance holds the Redis store to the memory store's suite, with
// the caller's instants (at the store's resolution of one microsecond).
func TestConformance(t *testing.T) {
	c := startRedis(t)
	limitertest.RunWith(t, func(t *testing.T) limiter.Store {
		c.FlushAll(context.Background())
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	}, limitertest.Options{Resolution: time.Microsecond})
}

// TestLeakyVirtual: the virtual queue decides as the real one does when
// nobody leaves it.
func TestLeakyVirtual(t *testing.T) {
	c := startRedis(t)
	limitertest.RunLeakyVirtual(t, func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	}, limitertest.Options{Resolution: time.Microsecond})
}

// TestOutage kills redis-server under a store, then starts it again, for
// each on_error: decisions follow it, none waits much longer than the
// timeout, the breaker opens (from then on answers are immediate) and
// closes by itself once Redis is back, and the limit is enforced again.
func TestOutage(t *testing.T) {
	lim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Hour})
	for _, mode := range []string{"local", "allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			srv := newServer(t)
			c := redis.NewClient(&redis.Options{Addr: srv.addr(), DialTimeout: 50 * time.Millisecond, ReadTimeout: 50 * time.Millisecond,
				WriteTimeout: 50 * time.Millisecond, ContextTimeoutEnabled: true, MaxRetries: -1})
			defer c.Close()
			var events []bool
			var mu sync.Mutex
			store, err := redisstore.New(c, redisstore.Options{Timeout: 50 * time.Millisecond, OnError: mode, Fallback: memstore.New(memstore.Options{}),
				BreakAfter: 3, BreakFor: 300 * time.Millisecond, OnBreaker: func(open bool, err error) {
					mu.Lock()
					events = append(events, open)
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			l, _ := limiter.New(store, "outage", lim)
			ctx := context.Background()
			allow := func(key string) (limiter.Decision, time.Duration) {
				begin := time.Now()
				d, err := l.Allow(ctx, key, time.Now(), 1)
				if err != nil {
					t.Fatalf("Allow returned %v; on_error must answer instead", err)
				}
				return d, time.Since(begin)
			}
			for i := range 6 {
				if d, _ := allow("a"); d.Allowed != (i < 5) {
					t.Fatalf("before the outage, request %d: %+v", i, d)
				}
			}

			srv.kill()
			for i := range 10 {
				d, took := allow("b")
				if took > 50*time.Millisecond+150*time.Millisecond {
					t.Errorf("decision %d during the outage took %v, above the 50ms timeout plus 150ms", i, took)
				}
				if i >= 3 && took > 20*time.Millisecond {
					t.Errorf("decision %d with the breaker open took %v; it must not call Redis", i, took)
				}
				switch mode {
				case "local": // the instance's own limit: 5
					if d.Allowed != (i < 5) {
						t.Errorf("local, request %d: %+v", i, d)
					}
				case "allow":
					if !d.Allowed {
						t.Errorf("allow, request %d rejected", i)
					}
				case "deny":
					if d.Allowed || d.RetryAfter < time.Second {
						t.Errorf("deny, request %d: %+v", i, d)
					}
				}
			}
			if store.Errors() != 3 || !store.Degraded() {
				t.Errorf("errors %d, degraded %v: want 3 failures, then the breaker open", store.Errors(), store.Degraded())
			}

			srv.start()
			deadline := time.Now().Add(10 * time.Second)
			for store.Degraded() {
				if time.Now().After(deadline) {
					t.Fatal("the breaker did not close within 10s of Redis coming back")
				}
				allow("probe")
				time.Sleep(20 * time.Millisecond)
			}
			for i := range 6 {
				if d, _ := allow("c"); d.Allowed != (i < 5) {
					t.Fatalf("after recovery, request %d: %+v", i, d)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(events) != 2 || !events[0] || events[1] {
				t.Errorf("breaker events %v, want [open close]", events)
			}
		})
	}
}

// TestTTL: with Redis's own clock, a key expires when its state would be a
// fresh key's, so idle clients cost nothing.
func TestTTL(t *testing.T) {
	c := startRedis(t)
	store := newStore(t, c, redisstore.Options{Timeout: 5 * time.Second})
	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Burst: 10})
	l, _ := limiter.New(store, "ttl", lim)
	ctx := context.Background()
	if d, err := l.Allow(ctx, "client", time.Now(), 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	keys, _ := c.Keys(ctx, "*").Result()
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	pttl, _ := c.PTTL(ctx, keys[0]).Result()
	if pttl <= 0 || pttl > 100*time.Millisecond {
		t.Errorf("TTL %v; one token of 10/s is back within 100ms", pttl)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(ctx, keys[0]).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("the key outlived its state")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
