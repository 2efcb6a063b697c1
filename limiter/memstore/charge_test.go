package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// TestChargeAllocs: charging does not allocate, for every algorithm whose
// state is inline, for a policy of several limits, and for a sliding log
// whose ring has room.
func TestChargeAllocs(t *testing.T) {
	m := func(l limiter.Limit, err error) limiter.Limit {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tb := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 100}))
	fw := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 100, Window: time.Minute}))
	sw2 := m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 100, Window: time.Minute, Slots: 1}))
	sw8 := m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 100, Window: time.Minute, Slots: 6}))
	sw65 := m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 100, Window: time.Minute, Slots: 60}))
	sl := m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 100, Window: time.Minute}))
	store := memstore.New(memstore.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		limits []limiter.Limit
	}{
		{"token_bucket", []limiter.Limit{tb}},
		{"fixed_window", []limiter.Limit{fw}},
		{"sliding_window/1", []limiter.Limit{sw2}},
		{"sliding_window/6", []limiter.Limit{sw8}},
		{"sliding_window/60", []limiter.Limit{sw65}},
		{"sliding_log", []limiter.Limit{sl}},
		{"several", []limiter.Limit{tb, fw, sw8}},
	} {
		l, err := limiter.New(store, "allocs-"+c.name, c.limits...)
		if err != nil {
			t.Fatal(err)
		}
		// A sliding log's ring grows to its bound once; so do the tables.
		for _, n := range []int64{200, -200} {
			if _, err := l.Charge(ctx, "k", t0, t0, n); err != nil {
				t.Fatal(err)
			}
		}
		i := 0
		allocs := testing.AllocsPerRun(200, func() {
			i++
			n := int64(3)
			if i%2 == 0 {
				n = -3
			}
			if _, err := l.Charge(ctx, "k", t0, t0, n); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Charge(ctx, "fresh", t0, t0, -1); err != nil { // refund to a key it does not hold
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations a charge and refund, want 0", c.name, allocs)
		}
	}
}

// TestChargeStoresNothing: a refund to a key the store does not hold
// stores nothing; a charge stores the key, and the janitor keeps a key in
// debt until the debt is paid.
func TestChargeStoresNothing(t *testing.T) {
	store := memstore.New(memstore.Options{})
	l := tokenBucket(t, store, "charge-janitor", 10, limiter.Rate{N: 1, Per: time.Second})
	ctx := context.Background()
	if d, err := l.Charge(ctx, "k", t0, t0, -5); err != nil || d.Remaining != 10 || store.Len() != 0 {
		t.Fatalf("refund to an absent key: %+v, %v, %d keys stored", d, err, store.Len())
	}
	if _, err := l.Charge(ctx, "k", t0, t0, 15); err != nil { // −5 tokens: full 15s later
		t.Fatal(err)
	}
	if n := store.Sweep(t0.Add(15*time.Second - 1)); n != 0 || store.Len() != 1 {
		t.Fatalf("the janitor dropped a key in debt (%d dropped)", n)
	}
	if n := store.Sweep(t0.Add(15 * time.Second)); n != 1 {
		t.Fatalf("the janitor kept a key whose debt is paid and bucket full again (%d dropped)", n)
	}
}
