package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// TestEvictionKeepsSpentKey: a client that has used up its limit floods
// a full store with junk keys, one request each, hoping its own entry is
// evicted and comes back fresh. It must stay spent, for every algorithm
// that can be spent: the junk keys cost less to forget (each gives back
// one request), so they go first. Each instant is exact: 1 ms apart.
func TestEvictionKeepsSpentKey(t *testing.T) {
	must := func(l limiter.Limit, err error) limiter.Limit {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	limits := map[string]limiter.Limit{
		"token_bucket":   must(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 10, Per: time.Hour}, Burst: 10})),
		"fixed_window":   must(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 10, Window: time.Hour})),
		"sliding_log":    must(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 10, Window: time.Hour})),
		"sliding_window": must(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 10, Window: time.Hour, Slots: 6})),
		"leaky_bucket":   must(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Delay: 9})),
	}
	for _, name := range []string{"token_bucket", "fixed_window", "sliding_log", "sliding_window", "leaky_bucket"} {
		t.Run(name, func(t *testing.T) {
			store := memstore.New(memstore.Options{MaxKeys: 1000})
			l, err := limiter.New(store, "p", limits[name])
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
			// A table already full of other clients, each one request in.
			for i := range 1000 {
				l.Allow(ctx, "client-"+strconv.Itoa(i), at(0), 1)
			}
			allowed := 0
			for range 12 {
				if d, _ := l.Allow(ctx, "spent", at(1), 1); d.Allowed {
					allowed++
				}
			}
			if allowed != 10 {
				t.Fatalf("the key was allowed %d of 12, want 10", allowed)
			}
			before := store.SpentEvictions()
			for i := range 3000 {
				l.Allow(ctx, "junk-"+strconv.Itoa(i), at(2+i), 1)
			}
			if d, _ := l.Allow(ctx, "spent", at(3002), 1); d.Allowed {
				t.Fatalf("after 3000 junk keys, the spent key was allowed again (evictions %d)", store.Evictions())
			}
			if n := store.Len(); n > 1000 {
				t.Errorf("the store tracks %d keys, above max_keys", n)
			}
			if store.Evictions() == 0 {
				t.Errorf("no eviction counted: the junk keys were not fresh")
			}
			if ev := store.SpentEvictions() - before; ev != 0 {
				t.Errorf("%d spent keys evicted by junk keys one request in", ev)
			}
		})
	}
}

// TestEvictionSpentCounted: a table where every entry is spent has only
// spent entries to give up; those evictions are counted apart, since
// each gave a client its full limit back.
func TestEvictionSpentCounted(t *testing.T) {
	store := memstore.New(memstore.Options{MaxKeys: 1000})
	l := tokenBucket(t, store, "p", 1, limiter.Rate{N: 1, Per: time.Hour})
	ctx := context.Background()
	for i := range 2000 {
		l.Allow(ctx, "client-"+strconv.Itoa(i), t0, 1)
	}
	ev, spent := store.Evictions(), store.SpentEvictions()
	if ev == 0 || spent != ev {
		t.Errorf("evictions %d, of spent keys %d: every entry was spent, so every eviction is of one", ev, spent)
	}
}
