package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// TestCounts: AddCount is INCRBY and PEXPIRE of one key of the prefix
// (each addition sets the expiry, 0 too), Count a GET; a count past its
// expiry is 0; Redis gone is ErrStoreUnavailable, and the breaker opens.
func TestCounts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, Timeout: outageTimeout})
	defer c.Close()
	s := newStore(t, c, redisstore.Options{Prefix: "p:", Timeout: outageTimeout, OnError: "allow", BreakAfter: 2, BreakFor: time.Hour})
	ctx, now := context.Background(), time.Now()
	for i, want := range []int64{3, 3, 10} {
		n := []int64{3, 0, 7}[i]
		if got, err := s.AddCount(ctx, "k", n, time.Hour, now); err != nil || got != want {
			t.Fatalf("AddCount(%d) = %d, %v; want %d", n, got, err, want)
		}
	}
	if got, err := s.Count(ctx, "k", now); err != nil || got != 10 {
		t.Fatalf("Count = %d, %v; want 10", got, err)
	}
	if got, err := s.Count(ctx, "other", now); err != nil || got != 0 {
		t.Fatalf("Count of none = %d, %v", got, err)
	}
	keys, err := c.Keys(ctx, "p:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v: want one of the prefix", keys, err)
	}
	if ttl, err := c.PTTL(ctx, keys[0]).Result(); err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("PTTL %v, %v: want an hour", ttl, err)
	}
	// 0 more sets the expiry all the same.
	if _, err := s.AddCount(ctx, "k", 0, 100*time.Millisecond, now); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got, err := s.Count(ctx, "k", now); err != nil || got != 0 {
		t.Fatalf("Count past the expiry = %d, %v", got, err)
	}
	srv.Kill()
	for range 3 {
		if _, err := s.AddCount(ctx, "k", 1, time.Hour, time.Now()); !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("AddCount with Redis gone: %v", err)
		}
	}
	if !s.Degraded() {
		t.Error("the breaker did not open")
	}
	begin := time.Now()
	if _, err := s.Count(ctx, "k", time.Now()); !errors.Is(err, limiter.ErrStoreUnavailable) || time.Since(begin) > outageTimeout/2 {
		t.Errorf("Count with the breaker open: %v after %v; want at once", err, time.Since(begin))
	}
}
