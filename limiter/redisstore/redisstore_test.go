package redisstore_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"limitproxy/limiter"
	"limitproxy/limiter/limitertest"
	"limitproxy/limiter/redisstore"
)

// startRedis starts a redis-server of its own on a free loopback port and
// stops it, by PID, when the test ends. A missing redis-server is a
// failure: `make test` installs it.
func startRedis(t testing.TB) *redis.Client {
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
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// TestConformance holds the Redis store to the memory store's suite, with
// the caller's instants (at the store's resolution of one microsecond).
func TestConformance(t *testing.T) {
	c := startRedis(t)
	limitertest.RunWith(t, func(t *testing.T) limiter.Store {
		c.FlushAll(context.Background())
		return redisstore.New(c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	}, limitertest.Options{Resolution: time.Microsecond})
}

// TestLeakyVirtual: the virtual queue decides as the real one does when
// nobody leaves it.
func TestLeakyVirtual(t *testing.T) {
	c := startRedis(t)
	limitertest.RunLeakyVirtual(t, func(t *testing.T) limiter.Store {
		return redisstore.New(c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	}, limitertest.Options{Resolution: time.Microsecond})
}
