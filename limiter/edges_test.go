package limiter_test

// Edge cases the model suites do not reach: arithmetic near its saturation
// points, idle times a store relies on to forget keys, the leaky bucket's
// queue across a drain and a reload, charges with the clock gone backwards
// and at their debt bound, and the constructors' bounds. Each goes through
// the Limiter API on the memory store, with fixed instants.

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

var edgeT0 = time.Unix(1_800_000_000, 0) // a whole minute

func edgeLimiter(t *testing.T, s limiter.Store, lim limiter.Limit, err error) *limiter.Limiter {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(s, "p", lim)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestEdgeTokenBucketLongIdle: a fast bucket idle for hours earns more
// nano-tokens than 63 bits hold (10⁶/s for 3 h is 1.08·10¹⁹; for 10 h the
// 128-bit product's high word is set); the refill saturates and the
// bucket is simply full, never negative.
func TestEdgeTokenBucketLongIdle(t *testing.T) {
	lim, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1_000_000, Per: time.Second}, Burst: 10})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	now := edgeT0
	for _, idle := range []time.Duration{0, 3 * time.Hour, 10 * time.Hour, 30 * 24 * time.Hour} {
		now = now.Add(idle)
		d, err := l.Allow(context.Background(), "k", now, 10)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("after %v idle: %+v (%v), want the whole burst of 10 admitted", idle, d, err)
		}
		if d, _ := l.Allow(context.Background(), "k", now, 1); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Fatalf("after %v idle, emptied: %+v, want refused for 1µs", idle, d)
		}
	}
}

// TestEdgeSlidingWindowIdle: the store forgets a sliding-window key only
// once its last written slot has left the window entirely; until then the
// slot still counts (weighted) and the key must be kept. Window 60 s in 6
// slots of 10 s, limit 1: a request at +15 s (slot [+10 s, +20 s)) counts
// until +80 s.
func TestEdgeSlidingWindowIdle(t *testing.T) {
	store := memstore.New(memstore.Options{})
	lim, err := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1, Window: time.Minute, Slots: 6})
	l := edgeLimiter(t, store, lim, err)
	ctx := context.Background()
	if d, err := l.Allow(ctx, "k", edgeT0.Add(15*time.Second), 1); err != nil || !d.Allowed {
		t.Fatalf("first request: %+v (%v)", d, err)
	}
	last := edgeT0.Add(80*time.Second - time.Nanosecond)
	if n := store.Sweep(last); n != 0 {
		t.Fatalf("Sweep at +80s−1ns dropped %d keys; the slot at +10s still counts", n)
	}
	// Peek: one nanosecond of the slot is still in the window.
	if d, err := l.Peek(ctx, "k", last); err != nil || d.Allowed {
		t.Fatalf("at +80s−1ns: %+v (%v), want refused (the request at +15s still counts)", d, err)
	}
	if n := store.Sweep(edgeT0.Add(80 * time.Second)); n != 1 {
		t.Fatalf("Sweep at +80s dropped %d keys, want the key, fresh again", n)
	}
}

// TestEdgeChargeSlidingLogBackwards: a charge whose clock went back past
// the window, with a reservation as old, is placed at the latest instant
// the log has seen (as Decide reads such a clock), so it counts; it is not
// written where the window has already passed.
func TestEdgeChargeSlidingLogBackwards(t *testing.T) {
	lim, err := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 10, Window: time.Minute})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	ctx := context.Background()
	late, early := edgeT0.Add(100*time.Second), edgeT0.Add(10*time.Second)
	if d, err := l.Charge(ctx, "k", late, late, 3); err != nil || d.Remaining != 7 {
		t.Fatalf("charge 3: %+v (%v)", d, err)
	}
	if d, err := l.Charge(ctx, "k", early, early, 2); err != nil || d.Remaining != 5 {
		t.Fatalf("charge 2 with the clock 90s back: %+v (%v), want 5 left (counted at +100s)", d, err)
	}
	if d, err := l.Allow(ctx, "k", late.Add(59*time.Second), 5); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("5 at +159s: %+v (%v), want admitted, the last 5", d, err)
	}
	if d, _ := l.Allow(ctx, "k", late.Add(59*time.Second), 1); d.Allowed {
		t.Fatalf("at +159s: a sixth admitted: %+v", d)
	}
}

// TestEdgeChargeTokenBucketCap: a charge takes at most ⌊content⌋ + Burst
// whole tokens, so the content never falls below −Burst and the fraction
// of a token the bucket holds is kept: 1 token/s, burst 10, 1.5 tokens
// held; a charge of 100 takes 11, leaving −9.5: the next token in 10.5 s.
func TestEdgeChargeTokenBucketCap(t *testing.T) {
	lim, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 10})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	ctx := context.Background()
	if d, err := l.Allow(ctx, "k", edgeT0, 10); err != nil || !d.Allowed {
		t.Fatalf("emptying: %+v (%v)", d, err)
	}
	now := edgeT0.Add(1500 * time.Millisecond)
	d, err := l.Charge(ctx, "k", now, edgeT0, 100)
	if err != nil || !d.Capped || d.Remaining != 0 || d.Next != 10500*time.Millisecond {
		t.Fatalf("charge 100 holding 1.5 tokens: %+v (%v), want capped, the next token in 10.5s", d, err)
	}
	if d, err := l.Charge(ctx, "k", now, edgeT0, 1); err != nil || !d.Capped || d.Next != 10500*time.Millisecond {
		t.Fatalf("charge 1 more at −9.5: %+v (%v), want capped, nothing taken", d, err)
	}
	// A refund of everything gives back 11 tokens at most: 1.5 held.
	if d, err := l.Charge(ctx, "k", now, edgeT0, -100); err != nil || d.Capped || d.Remaining != 10 {
		t.Fatalf("refund 100: %+v (%v), want a full bucket", d, err)
	}
}

// TestEdgeConstructorBounds: limits and windows at and past their bounds.
func TestEdgeConstructorBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"fixed_window limit MaxCount", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limiter.MaxCount, Window: time.Second})), true},
		{"fixed_window limit MaxCount+1", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limiter.MaxCount + 1, Window: time.Second})), true},
		{"fixed_window limit MaxWindowLimit", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limiter.MaxWindowLimit, Window: time.Second})), true},
		{"fixed_window limit MaxWindowLimit+1", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limiter.MaxWindowLimit + 1, Window: time.Second})), false},
		{"fixed_window limit 0", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 0, Window: time.Second})), false},
		{"fixed_window window 1ns", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1, Window: 1})), true},
		{"fixed_window window 0", second(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1, Window: 0})), false},
		{"sliding_window window 0", second(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1, Window: 0, Slots: 1})), false},
		{"sliding_window window −1s", second(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1, Window: -time.Second, Slots: 1})), false},
		{"sliding_window window 1ns", second(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1, Window: 1, Slots: 1})), true},
		{"sliding_window limit MaxCount+1", second(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: limiter.MaxCount + 1, Window: time.Second, Slots: 1})), false},
		{"sliding_log limit max", second(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: limiter.MaxSlidingLogLimit, Window: time.Second})), true},
		{"sliding_log limit max+1", second(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: limiter.MaxSlidingLogLimit + 1, Window: time.Second})), false},
		{"sliding_log window 0", second(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 1, Window: 0})), false},
	} {
		if (c.err == nil) != c.ok {
			t.Errorf("%s: error %v, want accepted %v", c.name, c.err, c.ok)
		}
	}
}

func second(_ limiter.Limit, err error) error { return err }

// TestEdgeTokenBucketSaturated: a bucket so slow and so large that its
// refill time does not fit in int64 nanoseconds (10⁶ tokens at one per
// 20,000 s is 6·10⁵ years): the instants saturate at the largest Time,
// they do not wrap into the past or panic.
func TestEdgeTokenBucketSaturated(t *testing.T) {
	lim, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: 20000 * time.Second}, Burst: 1_000_000})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	end := time.Unix(0, math.MaxInt64)
	d, err := l.Allow(context.Background(), "k", edgeT0, 1_000_000)
	if err != nil || !d.Allowed || !d.ResetAt.Equal(end) {
		t.Fatalf("emptying: %+v (%v), want ResetAt the largest instant", d, err)
	}
	d, err = l.Allow(context.Background(), "k", edgeT0, 1)
	if err != nil || d.Allowed || d.RetryAfter != 20000*time.Second || !d.ResetAt.Equal(end) {
		t.Fatalf("empty: %+v (%v), want refused for 20000s", d, err)
	}
	if q, w := lim.Quota(); q != 1_000_000 || w != time.Duration(math.MaxInt64) {
		t.Fatalf("Quota = %d, %v; want 10⁶ over the longest Duration", q, w)
	}
	// Product in (2⁶³, 2⁶⁴): 10 tokens over 10¹⁸ ns each.
	lim, _ = limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Duration(1e18)}, Burst: 10})
	if q, w := lim.Quota(); q != 10 || w != time.Duration(math.MaxInt64) {
		t.Fatalf("Quota = %d, %v; want 10 over the longest Duration", q, w)
	}
}

// TestEdgeQuota: each algorithm's quota and window, the leaky bucket's
// counting the requests its delay forwards at once.
func TestEdgeQuota(t *testing.T) {
	rate := limiter.Rate{N: 10, Per: time.Second}
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 2, Per: time.Second}, Burst: 10})
	lb, _ := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: rate, Queue: 3, Delay: 2})
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 7, Window: time.Minute})
	sl, _ := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 8, Window: time.Hour})
	sw, _ := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 9, Window: time.Minute, Slots: 6})
	for _, c := range []struct {
		lim    limiter.Limit
		quota  int64
		window time.Duration
	}{
		{tb, 10, 5 * time.Second},
		{lb, 6, 600 * time.Millisecond},
		{fw, 7, time.Minute},
		{sl, 8, time.Hour},
		{sw, 9, time.Minute},
	} {
		if q, w := c.lim.Quota(); q != c.quota || w != c.window {
			t.Errorf("%v: Quota = %d, %v; want %d, %v", c.lim.Algorithm(), q, w, c.quota, c.window)
		}
	}
}

// TestEdgeLeakyBucketBounds: the leaky bucket's parameters at and past
// their bounds, and costs against capacities.
func TestEdgeLeakyBucketBounds(t *testing.T) {
	rate := limiter.Rate{N: 10, Per: time.Second}
	lb := func(p limiter.LeakyBucketParams) error {
		p.Rate = rate
		_, err := limiter.NewLeakyBucket(p)
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"queue 0", lb(limiter.LeakyBucketParams{Queue: 0}), true},
		{"queue −1", lb(limiter.LeakyBucketParams{Queue: -1}), false},
		{"queue MaxQueue", lb(limiter.LeakyBucketParams{Queue: limiter.MaxQueue}), true},
		{"queue MaxQueue+1", lb(limiter.LeakyBucketParams{Queue: limiter.MaxQueue + 1}), false},
		{"max_wait 0", lb(limiter.LeakyBucketParams{MaxWait: 0}), true},
		{"max_wait −1ns", lb(limiter.LeakyBucketParams{MaxWait: -1}), false},
		{"delay 0", lb(limiter.LeakyBucketParams{Delay: 0}), true},
		{"delay −1", lb(limiter.LeakyBucketParams{Delay: -1}), false},
		{"delay MaxQueue", lb(limiter.LeakyBucketParams{Delay: limiter.MaxQueue}), true},
		{"delay MaxQueue+1", lb(limiter.LeakyBucketParams{Delay: limiter.MaxQueue + 1}), false},
		{"cost MaxCount", lb(limiter.LeakyBucketParams{Cost: limiter.MaxCount}), true},
		{"cost MaxCount+1", lb(limiter.LeakyBucketParams{Cost: limiter.MaxCount + 1}), false},
		{"cost −1", lb(limiter.LeakyBucketParams{Cost: -1}), false},
		{"rate 0", second(limiter.NewLeakyBucket(limiter.LeakyBucketParams{})), false},
		{"token_bucket cost above burst", second(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: rate, Burst: 5, Cost: 6})), false},
		{"token_bucket cost burst", second(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: rate, Burst: 5, Cost: 5})), true},
	} {
		if (c.err == nil) != c.ok {
			t.Errorf("%s: error %v, want accepted %v", c.name, c.err, c.ok)
		}
	}
	// Cost 0 means 1, as Params says.
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: rate, Burst: 5})
	l, _ := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: rate})
	tbc, lbc := tb.Params().(limiter.TokenBucketParams).Cost, l.Params().(limiter.LeakyBucketParams).Cost
	if tbc != 1 || lbc != 1 || tb.Cost() != 1 {
		t.Errorf("cost 0: token bucket %d, leaky bucket %d; want 1", tbc, lbc)
	}
}

// TestEdgeFreshState: an unbound limit has no state ID, and a fresh
// state is idle from the start (the zero Time), for every algorithm.
func TestEdgeFreshState(t *testing.T) {
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 5})
	if dl(tb).StateID() != -1 {
		t.Errorf("unbound limit: StateID %d, want -1", dl(tb).StateID())
	}
	if at := dl(tb).IdleAt(dl(tb).NewStates(1), 0, nil); !at.IsZero() {
		t.Errorf("fresh token bucket idle at %v, want the zero Time", at)
	}
	l, err := limiter.New(memstore.New(memstore.Options{}), "edge-fresh", tb)
	if err != nil {
		t.Fatal(err)
	}
	if id := dl(l.Limits()[0]).StateID(); id < 0 {
		t.Errorf("bound limit: StateID %d", id)
	}
}

// TestEdgeChargeFresh: a charge of one unit on a fresh key takes it.
func TestEdgeChargeFresh(t *testing.T) {
	lim, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 10})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	if d, err := l.Charge(context.Background(), "k", edgeT0, edgeT0, 1); err != nil || d.Remaining != 9 {
		t.Fatalf("charge 1 on a fresh key: %+v (%v), want 9 left", d, err)
	}
}

// TestEdgeLeakyDecisionFigures: the figures of each kind of leaky-bucket
// decision (at once, queued, refused, too heavy), with delay=: 10/s,
// queue 3, delay 2. A request leaves at once while its place is within
// the lead of now; Remaining counts those that still would, then the
// queue's free places.
func TestEdgeLeakyDecisionFigures(t *testing.T) {
	lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 3, MaxWait: time.Minute, Delay: 2})
	l := edgeLimiter(t, memstore.New(memstore.Options{VirtualQueues: true}), lim, err)
	ms := time.Millisecond
	for i, want := range []struct {
		allowed         bool
		delay, retry    time.Duration
		remaining       int64
		resetAt, next   time.Duration // from edgeT0 / from now
		limitOfDecision int64
	}{
		{true, 0, 0, 5, 100 * ms, 100 * ms, 6}, // places +0, +100, +200 ms leave at once
		{true, 0, 0, 4, 200 * ms, 100 * ms, 6},
		{true, 0, 0, 3, 300 * ms, 100 * ms, 6},
		{true, 100 * ms, 0, 2, 400 * ms, 100 * ms, 6}, // place +300 ms, leaves at +100 ms
		{true, 200 * ms, 0, 1, 500 * ms, 100 * ms, 6},
		{true, 300 * ms, 0, 0, 600 * ms, 100 * ms, 6},
		{false, 0, 100 * ms, 0, 600 * ms, 100 * ms, 6}, // full until the head leaves
	} {
		d, err := l.Allow(context.Background(), "k", edgeT0, 1)
		if err != nil || d.Allowed != want.allowed || d.Delay != want.delay || d.RetryAfter != want.retry ||
			d.Remaining != want.remaining || !d.ResetAt.Equal(edgeT0.Add(want.resetAt)) || d.Next != want.next || d.Limit != want.limitOfDecision {
			t.Errorf("request %d: %+v (%v), want %+v", i, d, err, want)
		}
	}
	// A request heavier than any wait can admit.
	if d, _ := l.Allow(context.Background(), "k", edgeT0, limiter.MaxCount+1); d.Allowed || d.RetryAfter != limiter.Never || d.Limit != 4 {
		t.Errorf("weight MaxCount+1: %+v, want never, Limit 4", d)
	}
}

// TestEdgeFixedWindowRefundedToZero: a window whose count a refund took
// back to zero is a fresh key's: a request with the clock gone back to an
// earlier window opens that window, it is not counted in the later one.
func TestEdgeFixedWindowRefundedToZero(t *testing.T) {
	lim, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Minute})
	if c := lim.Params().(limiter.FixedWindowParams).Cost; c != 1 {
		t.Errorf("cost 0: Params().Cost %d, want 1", c)
	}
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	ctx := context.Background()
	w1 := edgeT0.Add(70 * time.Second)
	if d, err := l.Allow(ctx, "k", w1, 1); err != nil || !d.Allowed {
		t.Fatalf("at +70s: %+v (%v)", d, err)
	}
	if d, err := l.Charge(ctx, "k", w1, w1, -1); err != nil || d.Remaining != 5 {
		t.Fatalf("refund: %+v (%v), want 5 left", d, err)
	}
	if d, err := l.Allow(ctx, "k", edgeT0.Add(30*time.Second), 1); err != nil || !d.Allowed || d.Remaining != 4 || !d.ResetAt.Equal(edgeT0.Add(time.Minute)) {
		t.Fatalf("at +30s: %+v (%v), want 4 left in the window ending at +60s", d, err)
	}
}

// TestEdgeLeakyIdle: DrainTime and IdleAt, which the store uses to size
// max_wait and to forget idle keys.
func TestEdgeLeakyIdle(t *testing.T) {
	p := limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 3, Cost: 2}
	if d := p.DrainTime(); d != 800*time.Millisecond {
		t.Errorf("DrainTime = %v, want 4 requests of 2 intervals: 800ms", d)
	}
	if d := (limiter.LeakyBucketParams{Queue: 3}).DrainTime(); d != 0 {
		t.Errorf("DrainTime without a rate = %v, want 0", d)
	}
	p.Cost = 0
	if d := p.DrainTime(); d != 400*time.Millisecond {
		t.Errorf("DrainTime of cost 0 = %v, want 400ms", d)
	}
	lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Delay: 1})
	if err != nil {
		t.Fatal(err)
	}
	fresh := dl(lim).NewStates(1)
	for _, q := range []*driver.Queue{nil, {}} {
		if at := dl(lim).IdleAt(fresh, 0, q); !at.IsZero() {
			t.Errorf("fresh key, queue %+v: reopens at %v, want the zero Time", q, at)
		}
	}
	gate := edgeT0.Add(time.Second)
	if at := dl(lim).IdleAt(fresh, 0, &driver.Queue{Gate: gate}); !at.Equal(gate.Add(100 * time.Millisecond)) {
		t.Errorf("queue reopened at +1s: free at %v, want a lead of one interval later", at)
	}
	s := dl(lim).NewStates(1)
	dl(lim).Step(s, 0, nil, edgeT0, 1)
	if at := dl(lim).IdleAt(s, 0, nil); !at.Equal(edgeT0.Add(100 * time.Millisecond)) {
		t.Errorf("one request at +0: reopens at %v, want +100ms", at)
	}
}

// TestEdgeChargeZero: a charge of nothing leaves a fresh key fresh: the
// store keeps no state for it.
func TestEdgeChargeZero(t *testing.T) {
	store := memstore.New(memstore.Options{})
	lim, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 10})
	l := edgeLimiter(t, store, lim, err)
	if d, err := l.Charge(context.Background(), "k", edgeT0, edgeT0, 0); err != nil || d.Remaining != 10 {
		t.Fatalf("charge 0: %+v (%v)", d, err)
	}
	if n := store.Sweep(edgeT0); n != 0 {
		t.Fatalf("Sweep after a charge of 0 dropped %d keys, want none kept", n)
	}
	// The step itself, for a store that does not short-cut it.
	st := dl(lim).NewStates(1)
	dl(lim).Charge(st, 0, edgeT0, edgeT0, 0)
	if at := dl(lim).IdleAt(st, 0, nil); !at.IsZero() {
		t.Fatalf("Charge(0) on a fresh state changed it: idle at %v", at)
	}
}

// TestEdgeWindowAccessors: cost 0 means 1, slots are bounded, and fresh
// window states are idle from the start.
func TestEdgeWindowAccessors(t *testing.T) {
	sl, _ := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 5, Window: time.Minute})
	sw, _ := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 5, Window: time.Minute, Slots: 6})
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Minute})
	slc, swc := sl.Params().(limiter.SlidingLogParams).Cost, sw.Params().(limiter.SlidingWindowParams).Cost
	if slc != 1 || swc != 1 {
		t.Errorf("cost 0: sliding log %d, sliding window %d; want 1", slc, swc)
	}
	if _, err := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 5, Window: 64 * time.Second, Slots: limiter.MaxSlots}); err != nil {
		t.Errorf("MaxSlots slots: %v", err)
	}
	if _, err := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 5, Window: 65 * time.Second, Slots: limiter.MaxSlots + 1}); err == nil {
		t.Errorf("MaxSlots+1 slots accepted")
	}
	for _, l := range []limiter.Limit{fw, sl, sw} {
		if at := dl(l).IdleAt(dl(l).NewStates(1), 0, nil); !at.IsZero() {
			t.Errorf("fresh %v idle at %v", l.Algorithm(), at)
		}
	}
}

// TestEdgeSlidingLogBackwards: a sliding log reads an instant earlier than
// its newest entry as that entry's, in its decision's figures too, and
// entries a refused request found expired stay expired for a later
// request whose clock went back.
func TestEdgeSlidingLogBackwards(t *testing.T) {
	lim, err := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 3, Window: time.Minute})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	ctx := context.Background()
	at := func(s int) time.Time { return edgeT0.Add(time.Duration(s) * time.Second) }
	l.Allow(ctx, "k", at(100), 1)
	if d, err := l.Allow(ctx, "k", at(10), 1); err != nil || !d.Allowed || d.Remaining != 1 || !d.ResetAt.Equal(at(160)) {
		t.Fatalf("at +10s after +100s: %+v (%v), want 1 left, the window empty at +160s", d, err)
	}

	lim, err = limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 2, Window: time.Minute})
	l = edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	l.Allow(ctx, "k", at(0), 1)
	l.Allow(ctx, "k", at(50), 1)
	// At +70s the entry of +0s has left; 2 more do not fit.
	if d, _ := l.Allow(ctx, "k", at(70), 2); d.Allowed {
		t.Fatalf("2 at +70s admitted: %+v", d)
	}
	// Back at +20s, read as +50s: only the entry of +50s counts.
	if d, err := l.Allow(ctx, "k", at(20), 1); err != nil || !d.Allowed {
		t.Fatalf("at +20s after a refusal at +70s: %+v (%v), want admitted (the +0s entry left)", d, err)
	}
}

// TestEdgeWindowRefundFigures: after a refund, the decision's figures
// describe the window that is left: empty, reset now; else when its newest
// entry leaves.
func TestEdgeWindowRefundFigures(t *testing.T) {
	ctx := context.Background()
	at := func(s int) time.Time { return edgeT0.Add(time.Duration(s) * time.Second) }
	fw, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Minute})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), fw, err)
	l.Allow(ctx, "k", at(10), 1)
	if d, err := l.Charge(ctx, "k", at(20), at(10), -1); err != nil || d.Remaining != 5 || !d.ResetAt.Equal(at(20)) {
		t.Errorf("fixed window refunded to zero: %+v (%v), want reset now (+20s)", d, err)
	}
	sl, err := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 10, Window: time.Minute})
	l = edgeLimiter(t, memstore.New(memstore.Options{}), sl, err)
	l.Allow(ctx, "k", at(0), 2)
	if d, err := l.Charge(ctx, "k", at(30), at(0), -1); err != nil || d.Remaining != 9 || !d.ResetAt.Equal(at(60)) {
		t.Errorf("sliding log refund of 1 of 2: %+v (%v), want 9 left, empty at +60s", d, err)
	}
	if d, err := l.Charge(ctx, "k", at(30), at(0), -1); err != nil || d.Remaining != 10 || !d.ResetAt.Equal(at(30)) {
		t.Errorf("sliding log refunded to zero: %+v (%v), want reset now (+30s)", d, err)
	}
}

// TestEdgeSlidingWindowBackwards: a sliding window reads an instant before
// its newest slot as the start of that slot (the oldest slot then fully
// weighted), except when the refunds emptied it: an empty window is a
// fresh key's, whatever slot it last wrote. Window 60 s in 6 slots, limit 5.
func TestEdgeSlidingWindowBackwards(t *testing.T) {
	ctx := context.Background()
	at := func(s int) time.Time { return edgeT0.Add(time.Duration(s) * time.Second) }
	lim, err := limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 5, Window: time.Minute, Slots: 6})
	l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	l.Allow(ctx, "k", at(45), 1)  // slot 4
	l.Allow(ctx, "k", at(100), 1) // slot 10; slot 4 still weighs 1
	// At +30s, read as +100s: slots 5–10 hold 1, slot 4 weighs 1: 3 with this one.
	if d, err := l.Allow(ctx, "k", at(30), 1); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("at +30s after +100s: %+v (%v), want admitted, 2 left", d, err)
	}

	l = edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
	l.Allow(ctx, "k", at(100), 1)
	if d, err := l.Charge(ctx, "k", at(100), at(100), -1); err != nil || d.Remaining != 5 {
		t.Fatalf("refund: %+v (%v)", d, err)
	}
	// Empty again: +30s opens slot 3, which leaves the window at +100s.
	if d, err := l.Allow(ctx, "k", at(30), 1); err != nil || !d.Allowed || d.Remaining != 4 || !d.ResetAt.Equal(at(100)) {
		t.Fatalf("at +30s after a refund emptied the window: %+v (%v), want 4 left, empty at +100s", d, err)
	}
}

// TestEdgeCheckCharge: a leaky bucket cannot be charged after the fact,
// nor a Limit no constructor built; the others can.
func TestEdgeCheckCharge(t *testing.T) {
	var zero limiter.Limit
	if err := dl(zero).CheckCharge(); err == nil {
		t.Errorf("zero Limit: CheckCharge nil")
	}
	lb, _ := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}})
	var pe *limiter.ParamError
	if err := dl(lb).CheckCharge(); !errors.As(err, &pe) || pe.Field != "cost_from" {
		t.Errorf("leaky bucket: CheckCharge %v, want a ParamError on cost_from", err)
	}
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 1})
	if err := dl(tb).CheckCharge(); err != nil {
		t.Errorf("token bucket: CheckCharge %v", err)
	}
}

// TestEdgeBans: ban parameters at their bounds, the escalation's
// arithmetic near overflow, an expired record starting again at level 1,
// and the listing order.
func TestEdgeBans(t *testing.T) {
	ok := perkey.BanParams{Duration: time.Nanosecond, Factor: 1, Max: time.Nanosecond}
	if err := ok.Validate(); err != nil {
		t.Errorf("duration 1ns, factor 1, max = duration, memory 0: %v", err)
	}
	for _, p := range []perkey.BanParams{
		{Duration: 0, Factor: 1, Max: time.Second},
		{Duration: time.Second, Factor: 0, Max: time.Second},
		{Duration: time.Second, Factor: 1, Max: time.Second - 1},
		{Duration: time.Second, Factor: 1, Max: time.Second, Memory: -1},
	} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	p := perkey.BanParams{Duration: time.Second, Factor: 2, Max: 10 * time.Second}
	for level, want := range map[int64]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, math.MaxInt64: 10 * time.Second} {
		if got := p.DurationAt(level); got != want {
			t.Errorf("DurationAt(%d) = %v, want %v", level, got, want)
		}
	}
	// Factor 1 never escalates, and returns at once at any level.
	if got := (perkey.BanParams{Duration: time.Second, Factor: 1, Max: time.Hour}).DurationAt(math.MaxInt64); got != time.Second {
		t.Errorf("factor 1 at the top level: %v", got)
	}
	// d·Factor exactly representable is not clamped.
	half := time.Duration(math.MaxInt64 / 2)
	if got := (perkey.BanParams{Duration: half, Factor: 2, Max: math.MaxInt64}).DurationAt(2); got != 2*half {
		t.Errorf("DurationAt(2) of MaxInt64/2 ×2 = %v, want %v", got, 2*half)
	}
	if got := (perkey.BanParams{Duration: half + 1, Factor: 2, Max: math.MaxInt64}).DurationAt(2); got != math.MaxInt64 {
		t.Errorf("DurationAt(2) past MaxInt64 = %v, want MaxInt64", got)
	}

	// An expired record: the next offence is level 1 again.
	p = perkey.BanParams{Duration: time.Minute, Factor: 2, Max: time.Hour, Memory: time.Hour}
	b := p.Offend(perkey.Ban{}, edgeT0)
	b = p.Offend(b, edgeT0.Add(2*time.Minute))
	if b.Level != 2 {
		t.Fatalf("second offence within memory: level %d, want 2", b.Level)
	}
	if b = p.Offend(b, b.Expires.Add(time.Second)); b.Level != 1 {
		t.Errorf("offence after the record expired: level %d, want 1", b.Level)
	}
	// Near the end of time the ban saturates, it does not wrap.
	end := time.Unix(0, math.MaxInt64)
	if b := p.Offend(perkey.Ban{}, end.Add(-time.Second)); !b.Until.Equal(end) || !b.Expires.Equal(end) {
		t.Errorf("ban a second before the end of time: until %v, expires %v", b.Until, b.Expires)
	}

	bans := []perkey.Ban{
		{Policy: "b", Key: "k", Until: edgeT0},
		{Policy: "a", Key: "z", Until: edgeT0},
		{Policy: "a", Key: "y", Until: edgeT0},
		{Policy: "c", Key: "k", Until: edgeT0.Add(time.Second)},
	}
	perkey.SortBans(bans)
	var got []string
	for _, b := range bans {
		got = append(got, b.Policy+"/"+b.Key)
	}
	if strings.Join(got, " ") != "c/k a/y a/z b/k" {
		t.Errorf("SortBans: %v, want c/k a/y a/z b/k", got)
	}
}

// dl returns l as package driver sees it, whose methods take a pointer.
func dl(l limiter.Limit) *driver.Limit {
	d := l.Driver()
	return &d
}
