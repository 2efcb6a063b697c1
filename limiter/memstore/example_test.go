package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// A store bounded to 3 keys, in front of a token bucket of 10 refilled at
// 1 a second, asked at one instant. A fourth client evicts the entry
// closest to becoming fresh (bob's, one token short of full), not carol's
// (nine short), whose eviction would give her tokens back; bob, back,
// starts again from a full bucket and evicts dave's (two short). Sweep drops the keys whose
// buckets have refilled.
func ExampleNew() {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // any instant: the example passes the time in
	store := memstore.New(memstore.Options{MaxKeys: 3})
	tb, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 10})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(store, "api", tb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		key string
		n   int64
	}{{"alice", 5}, {"bob", 1}, {"carol", 9}, {"dave", 2}, {"bob", 1}} {
		d, err := l.Allow(ctx, c.key, t0, c.n)
		if err != nil {
			panic(err) // the store could not decide (never, in memory)
		}
		fmt.Printf("%s takes %d: allowed=%v remaining=%d\n", c.key, c.n, d.Allowed, d.Remaining)
	}
	fmt.Println("keys:", store.Len(), "evictions:", store.Evictions(), "of spent keys:", store.SpentEvictions())
	fmt.Println("swept 10 s later:", store.Sweep(t0.Add(10*time.Second)), "keys left:", store.Len())
	// Output:
	// alice takes 5: allowed=true remaining=5
	// bob takes 1: allowed=true remaining=9
	// carol takes 9: allowed=true remaining=1
	// dave takes 2: allowed=true remaining=8
	// bob takes 1: allowed=true remaining=9
	// keys: 3 evictions: 2 of spent keys: 0
	// swept 10 s later: 3 keys left: 0
}

// A leaky bucket of 10 a second (one every 100 ms) with a queue of 2, on
// a store whose queues are virtual: each decision, at its exact instant,
// releases the waiters whose time has come, so the example needs no
// timers and nobody calls Wait. A request admitted with a Delay waits
// that long in the queue; one that finds the queue full is refused, told
// when a place frees up.
func ExampleOptions_virtualQueues() {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{VirtualQueues: true})
	lb, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{
		Rate:    limiter.Rate{N: 10, Per: time.Second},
		Queue:   2,
		MaxWait: time.Second,
	})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(store, "reports", lb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, at := range []time.Duration{0, 0, 0, 0, 150 * time.Millisecond, 400 * time.Millisecond} {
		d, err := l.Allow(ctx, "bob", t0.Add(at), 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("t+%v: allowed=%v delay=%v retry_after=%v\n", at, d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// t+0s: allowed=true delay=0s retry_after=0s
	// t+0s: allowed=true delay=100ms retry_after=0s
	// t+0s: allowed=true delay=200ms retry_after=0s
	// t+0s: allowed=false delay=0s retry_after=100ms
	// t+150ms: allowed=true delay=150ms retry_after=0s
	// t+400ms: allowed=true delay=0s retry_after=0s
}
