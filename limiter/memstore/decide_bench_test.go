package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// BenchmarkDecideHot is one decision on a key already tracked: the hot
// path (hash, shard lock, table probe, step), which eviction never
// touches.
func BenchmarkDecideHot(b *testing.B) {
	store := memstore.New(memstore.Options{MaxKeys: 1000})
	l := tokenBucket(b, store, "hot", 100, limiter.Rate{N: 100, Per: time.Second})
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		l.Allow(ctx, "client", now, 1)
	}
}

// BenchmarkDecideFull is one decision on a new key in a full store: each
// one evicts an entry that is not fresh (the flood case).
func BenchmarkDecideFull(b *testing.B) {
	const maxKeys = 10_000
	store := memstore.New(memstore.Options{MaxKeys: maxKeys})
	l := tokenBucket(b, store, "full", 10, limiter.Rate{N: 10, Per: time.Hour})
	ctx := context.Background()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "junk-" + strconv.Itoa(i)
	}
	for i := range maxKeys {
		l.Allow(ctx, keys[i%len(keys)], t0, 1)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		l.Allow(ctx, keys[i%len(keys)], t0.Add(time.Duration(i)*time.Microsecond), 1)
	}
}

// TestDecideAllocs: a decision on a key the store holds allocates
// nothing, whatever the algorithm, one limit or several, and so does a
// peek; a leaky bucket's key with a queue at rest (described to the step
// through the driver's interface) included.
func TestDecideAllocs(t *testing.T) {
	m := func(l limiter.Limit, err error) limiter.Limit {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	rate := limiter.Rate{N: 1000, Per: time.Second}
	tb := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: rate, Burst: 10}))
	fw := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 10, Window: time.Second}))
	sl := m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 10, Window: time.Second}))
	sw1 := m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 10, Window: time.Second, Slots: 1}))
	sw8 := m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 10, Window: 8 * time.Second, Slots: 8}))
	lb := m(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: rate, Queue: 2, MaxWait: time.Second}))
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		limits []limiter.Limit
	}{
		{"token_bucket", []limiter.Limit{tb}},
		{"fixed_window", []limiter.Limit{fw}},
		{"sliding_log", []limiter.Limit{sl}},
		{"sliding_window_1", []limiter.Limit{sw1}},
		{"sliding_window_8", []limiter.Limit{sw8}},
		{"leaky_bucket", []limiter.Limit{lb}},
		{"several", []limiter.Limit{tb, fw, sw8, lb}},
	} {
		store := memstore.New(memstore.Options{VirtualQueues: true})
		l, err := limiter.New(store, "allocs-"+c.name, c.limits...)
		if err != nil {
			t.Fatal(err)
		}
		// The key is stored, a sliding log's ring has grown to its bound,
		// and a leaky bucket's key has had a request wait: its queue stays.
		now := t0
		for range 12 {
			if _, err := l.Allow(ctx, "k", now, 1); err != nil {
				t.Fatal(err)
			}
		}
		i := 0
		allocs := testing.AllocsPerRun(200, func() {
			i++
			at := now.Add(time.Duration(i) * 10 * time.Millisecond) // the exit open again
			if _, err := l.Allow(ctx, "k", at, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Peek(ctx, "k", at); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations a decision and a peek, want 0", c.name, allocs)
		}
	}
}
