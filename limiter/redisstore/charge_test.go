package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// TestChargeClock: with Redis's clock, a charge's reservation instant is
// read as its age at the caller's now, so a caller whose clock is an hour
// off still refunds in the window its reservation was counted in; and a
// reservation two hours old refunds nothing. The key's TTL follows the
// state after the charge: a bucket in debt lives until it is full again.
func TestChargeClock(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	store := newStore(t, c, redisstore.Options{Timeout: 5 * time.Second})
	ctx := context.Background()
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 10, Window: 24 * time.Hour})
	l, _ := limiter.New(store, "clock", fw)
	skewed := time.Now().Add(time.Hour)
	if d, err := l.Allow(ctx, "k", skewed, 4); err != nil || d.Remaining != 6 {
		t.Fatal(d, err)
	}
	if d, err := l.Charge(ctx, "k", skewed, skewed.Add(-2*24*time.Hour), -4); err != nil || d.Remaining != 6 {
		t.Fatalf("refund of a reservation two days old: %+v, %v; want nothing refunded", d, err)
	}
	if d, err := l.Charge(ctx, "k", skewed.Add(time.Millisecond), skewed, -4); err != nil || d.Remaining != 10 {
		t.Fatalf("refund of a reservation 1ms old on a clock an hour ahead: %+v, %v; want 4 back", d, err)
	}

	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Burst: 10})
	lt, _ := limiter.New(store, "clock-tb", tb)
	if d, err := lt.Charge(ctx, "k", time.Now(), time.Now(), 15); err != nil || d.Remaining != 0 || d.Next < 500*time.Millisecond {
		t.Fatalf("Charge(15) on a bucket of 10 at 10/s: %+v, %v; want -5 tokens, one back in 0.6s", d, err)
	}
	keys, _ := c.Keys(ctx, "limitproxy:*clock-tb*").Result()
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	// 15 tokens to refill at 10/s.
	if pttl, _ := c.PTTL(ctx, keys[0]).Result(); pttl <= 1100*time.Millisecond || pttl > 1500*time.Millisecond {
		t.Errorf("TTL of a bucket 5 tokens in debt: %v, want about 1.5s (a bucket of 0 tokens would be full in 1s)", pttl)
	}
}

// TestChargeOutage: a charge that Redis cannot make follows on_error as
// far as it can: "local" charges the fallback store (which decided
// meanwhile), "allow" and "deny" return the error for the caller to
// report. Failures count, and the breaker opens on charges too.
func TestChargeOutage(t *testing.T) {
	t.Parallel()
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 10, Window: time.Hour})
	for _, mode := range []string{"local", "allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			// The product's client: no retries, one dial an attempt.
			c := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, Timeout: outageTimeout})
			defer c.Close()
			fallback := memstore.New(memstore.Options{})
			store, err := redisstore.New(c, redisstore.Options{Timeout: outageTimeout, OnError: mode, Fallback: fallback,
				BreakAfter: 2, BreakFor: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			l, _ := limiter.New(store, "outage", fw)
			local, _ := limiter.New(fallback, "outage", fw)
			ctx := context.Background()
			now := time.Now()
			if d, err := l.Charge(ctx, "k", now, now, 3); err != nil || d.Remaining != 7 {
				t.Fatalf("before the outage: %+v, %v", d, err)
			}
			srv.Kill()
			for i := range 4 { // 2 failures, then the breaker is open
				d, err := l.Charge(ctx, "k", now, now, 2)
				switch mode {
				case "local":
					if err != nil || d.Remaining != 10-2*int64(i+1) {
						t.Fatalf("local, charge %d: %+v, %v; want the fallback charged", i, d, err)
					}
				default:
					if !errors.Is(err, limiter.ErrStoreUnavailable) {
						t.Fatalf("%s, charge %d: %+v, %v; want ErrStoreUnavailable", mode, i, d, err)
					}
				}
			}
			if store.Errors() != 2 || !store.Degraded() {
				t.Errorf("errors %d, degraded %v: want 2 failures, then the breaker open", store.Errors(), store.Degraded())
			}
			want := int64(10)
			if mode == "local" {
				want = 2
			}
			if d, _ := local.Charge(ctx, "k", now, now, 0); d.Remaining != want {
				t.Errorf("the fallback after the outage: %+v, want %d remaining", d, want)
			}
		})
	}
}

// TestChargeCluster: on Redis Cluster, charges are atomic per key in its
// slot (no unit lost under concurrency), and reconcile as on one node.
func TestChargeCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.SharedCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	newCluster := func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second, Prefix: redistest.Prefix(t)})
	}
	limitertest.RunCharge(t, newCluster, limitertest.Options{Resolution: time.Microsecond, Seeds: 1, Parallel: true, OneKey: true})
}
