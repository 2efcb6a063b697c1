package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestRedisDegraded: while Redis does not answer and the breaker is open,
// limitproxy_store_degraded{node} is 1 for the node and /readyz answers
// 503 naming why; once Redis is back and a decision has succeeded, both
// say so.
func TestRedisDegraded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := "http://127.0.0.1:1" // never reached: every request is denied or limited
	l := startServer(t, "degraded.toml", fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
access = false
[store]
backend = "redis"
[store.redis]
addrs = [%q]
timeout = "50ms"
on_error = "deny"
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`, srv.Addr(), up))
	proxy, admin := "http://"+l.Proxy.String(), "http://"+l.Admin.String()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	gauge := `limitproxy_store_degraded{backend="redis",node="` + srv.Addr() + `"} `
	get(proxy + "/")
	if _, m := get(admin + "/metrics"); !strings.Contains(m, gauge+"0") {
		t.Errorf("/metrics with Redis up lacks %s0", gauge)
	}
	srv.Kill()
	for range 10 {
		get(proxy + "/")
	}
	if _, m := get(admin + "/metrics"); !strings.Contains(m, gauge+"1") {
		t.Errorf("/metrics with the breaker open lacks %s1", gauge)
	}
	if code, body := get(admin + "/readyz"); code != 503 {
		t.Errorf("/readyz with Redis down: %d %s", code, body)
	}
	srv.Restart()
	poll.For(t, 10*time.Second, func() bool {
		get(proxy + "/")
		_, m := get(admin + "/metrics")
		return strings.Contains(m, gauge+"0")
	}, "the breaker did not close after Redis came back")
	if code, body := get(admin + "/readyz"); code != 200 {
		t.Errorf("/readyz with Redis back: %d %s", code, body)
	}
}

// TestRedisClusterOneAddress: a Redis Cluster node given as the one
// address is refused at start-up, named, rather than run as a single node
// that takes every MOVED for an outage.
func TestRedisClusterOneAddress(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	_, err := newStores(config.Store{Backend: config.BackendRedis, Redis: config.Redis{Addrs: addrs[:1], Timeout: time.Second, OnError: "deny"}},
		zap.NewNop(), time.Now)
	if !errors.Is(err, redisstore.ErrClusterNode) || !strings.Contains(err.Error(), addrs[0]) || !strings.Contains(err.Error(), "store.redis.addrs") {
		t.Errorf("newStores: %v; want an error at store.redis.addrs naming %s as a Cluster node", err, addrs[0])
	}
}
