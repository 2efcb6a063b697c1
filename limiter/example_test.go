package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// t0 is an arbitrary instant: the examples pass the time in, so their
// output does not depend on the clock.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// A token bucket of 2 tokens refilled at 1 a second, asked at exact
// instants: two requests pass at once, the third waits for a token.
func ExampleLimiter_Allow() {
	tb, err := limiter.NewTokenBucket(limiter.TokenBucketParams{
		Rate:  limiter.Rate{N: 1, Per: time.Second},
		Burst: 2,
	})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(memstore.New(memstore.Options{}), "api", tb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond, time.Second} {
		d, err := l.Allow(ctx, "203.0.113.9", t0.Add(at), 1)
		if err != nil {
			panic(err) // the store could not decide (never, in memory)
		}
		fmt.Printf("t+%v: allowed=%v remaining=%d retry_after=%v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// t+0s: allowed=true remaining=1 retry_after=0s
	// t+0s: allowed=true remaining=0 retry_after=0s
	// t+0s: allowed=false remaining=0 retry_after=1s
	// t+500ms: allowed=false remaining=0 retry_after=500ms
	// t+1s: allowed=true remaining=0 retry_after=0s
}

// A sliding window of 3 requests a minute in 6 slots: the oldest slot
// counts in proportion to the part of it still inside the window, so the
// quota comes back gradually, not all at once at a window's edge.
func ExampleNewSlidingWindow() {
	sw, err := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 3, Window: time.Minute, Slots: 6})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(memstore.New(memstore.Options{}), "login", sw)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, at := range []time.Duration{0, 0, 0, 30 * time.Second, 65 * time.Second, 65 * time.Second} {
		d, _ := l.Allow(ctx, "alice", t0.Add(at), 1)
		fmt.Printf("t+%v: allowed=%v remaining=%d\n", at, d.Allowed, d.Remaining)
	}
	// Output:
	// t+0s: allowed=true remaining=2
	// t+0s: allowed=true remaining=1
	// t+0s: allowed=true remaining=0
	// t+30s: allowed=false remaining=0
	// t+1m5s: allowed=true remaining=0
	// t+1m5s: allowed=false remaining=0
}

// A leaky bucket queues what exceeds its rate, in the memory store's real
// FIFO: Allow admits each request with the Delay of its place, and Wait
// returns when the queue releases it, one every 1/rate (here 20 ms). A
// request that finds the queue full is rejected at once.
func ExampleLimiter_Wait() {
	lb, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{
		Rate:    limiter.Rate{N: 50, Per: time.Second},
		Queue:   2,
		MaxWait: time.Second,
	})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(memstore.New(memstore.Options{Clock: time.Now}), "reports", lb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Now()
	var admitted []limiter.Decision
	for i := range 4 {
		d, _ := l.Allow(ctx, "bob", now, 1)
		fmt.Printf("request %d: allowed=%v delay=%v\n", i, d.Allowed, d.Delay)
		if d.Allowed {
			admitted = append(admitted, d)
		}
	}
	for i, d := range admitted {
		if err := l.Wait(ctx, d); err != nil { // at most 40 ms here
			panic(err)
		}
		fmt.Printf("request %d released\n", i)
	}
	// Output:
	// request 0: allowed=true delay=0s
	// request 1: allowed=true delay=20ms
	// request 2: allowed=true delay=40ms
	// request 3: allowed=false delay=0s
	// request 0 released
	// request 1 released
	// request 2 released
}

// Costs: a limit's Cost is what one request takes from it, Allow's weight
// multiplies it, and Charge settles a cost known only afterwards (here a
// reservation of 10 units, then 25 really used, then a refund of 5).
func ExampleLimiter_Charge() {
	fw, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 100, Window: time.Minute, Cost: 1})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(memstore.New(memstore.Options{}), "tokens", fw)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := l.Allow(ctx, "team-7", t0, 10) // reserve an estimate
	fmt.Println("reserved: remaining", d.Remaining)
	d, _ = l.Charge(ctx, "team-7", t0.Add(time.Second), t0, 25-10) // the answer said 25
	fmt.Println("charged: remaining", d.Remaining)
	d, _ = l.Charge(ctx, "team-7", t0.Add(2*time.Second), t0, -5) // 5 given back
	fmt.Println("refunded: remaining", d.Remaining)
	d, _ = l.Allow(ctx, "team-7", t0.Add(3*time.Second), 90)
	fmt.Println("90 more: allowed", d.Allowed, "retry after", d.RetryAfter)
	// Output:
	// reserved: remaining 90
	// charged: remaining 75
	// refunded: remaining 80
	// 90 more: allowed false retry after 57s
}

// Limits as a configuration file writes them, each with its algorithm's
// defaults for the keys left out (a token bucket's burst is one period's
// worth of its rate, a leaky bucket's max_wait the time its full queue
// takes to drain); Set says which keys were written, so that one written
// as 0 stays 0. Scaled is what a per-key override's scale makes of one.
func ExampleNewLimit() {
	for _, s := range []limiter.Spec{
		{Algorithm: limiter.TokenBucket, Rate: limiter.Rate{N: 10, Per: time.Second}},
		{Algorithm: limiter.LeakyBucket, Rate: limiter.Rate{N: 5, Per: time.Second}, Queue: 4},
		{Algorithm: limiter.LeakyBucket, Rate: limiter.Rate{N: 5, Per: time.Second}, Queue: 4, Set: []string{"max_wait"}},
		{Algorithm: limiter.SlidingWindow, Limit: 600, Window: time.Minute},
	} {
		l, err := limiter.NewLimit(s)
		if err != nil {
			panic(err)
		}
		fmt.Println(l)
	}
	tb, _ := limiter.NewLimit(limiter.Spec{Algorithm: limiter.TokenBucket, Rate: limiter.Rate{N: 10, Per: time.Second}, Burst: 20})
	gold, _ := tb.Scaled(2.5)
	fmt.Println(gold)
	// Output:
	// token_bucket rate=10/1s burst=10
	// leaky_bucket rate=5/1s queue=4 max_wait=1s
	// leaky_bucket rate=5/1s queue=4 max_wait=0s
	// sliding_window limit=600 window=1m0s slots=1
	// token_bucket rate=25/1s burst=50
}

// A quota per calendar day in Berlin, on the night the clocks go forward:
// the day has 23 hours, and a request refused at 00:30 waits 22h30m, to
// the next local midnight.
func ExampleNewFixedWindow_calendar() {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	day, err := limiter.NewFixedWindow(limiter.FixedWindowParams{
		Limit:    1,
		Calendar: limiter.CalendarDay,
		TimeZone: berlin,
	})
	if err != nil {
		panic(err)
	}
	l, err := limiter.New(memstore.New(memstore.Options{}), "daily", day)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	at := time.Date(2026, 3, 29, 0, 30, 0, 0, berlin)
	for range 2 {
		d, _ := l.Allow(ctx, "203.0.113.9", at, 1)
		fmt.Printf("allowed=%v retry_after=%v reset=%v\n", d.Allowed, d.RetryAfter, d.ResetAt.In(berlin).Format(time.DateTime))
	}
	// Output:
	// allowed=true retry_after=0s reset=2026-03-30 00:00:00
	// allowed=false retry_after=22h30m0s reset=2026-03-30 00:00:00
}
