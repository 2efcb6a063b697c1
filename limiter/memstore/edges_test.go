package memstore_test

// Edges of the leaky-bucket queue that the conformance suite does not
// reach: the schedule after the queue drained, with delay=, and a reload
// that shrinks queue= below the number already waiting. Virtual queues
// release on the instants given, so nothing sleeps.

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

var edgeT0 = time.Unix(1_800_000_000, 0)

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

// TestEdgeLeakyDelayAfterDrain: with delay=, the first request after the
// queue drained takes its place after the queue's last release, not after
// the last request that left at once; so the one behind it waits. 10/s,
// queue 2, delay 1 (one interval of a burst forwarded at once).
func TestEdgeLeakyDelayAfterDrain(t *testing.T) {
	lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 2, MaxWait: time.Minute, Delay: 1})
	l := edgeLimiter(t, memstore.New(memstore.Options{VirtualQueues: true}), lim, err)
	ms := time.Millisecond
	for i, c := range []struct {
		at      time.Duration
		allowed bool
		delay   time.Duration
	}{
		// A burst: two leave at once (the delay's one and the head),
		// two wait, one is refused.
		{0, true, 0}, {0, true, 0}, {0, true, 100 * ms}, {0, true, 200 * ms}, {0, false, 0},
		// The queue released at +100 ms and +200 ms, and reopened at
		// +300 ms: the schedule's next place is +300 ms + the lead.
		{300 * ms, true, 0},
		{300 * ms, true, 100 * ms},
	} {
		d, err := l.Allow(context.Background(), "k", edgeT0.Add(c.at), 1)
		if err != nil || d.Allowed != c.allowed || d.Delay != c.delay {
			t.Fatalf("request %d at +%v: allowed %v delay %v (%v), want %v %v", i, c.at, d.Allowed, d.Delay, err, c.allowed, c.delay)
		}
	}
}

// TestEdgeLeakyRetryAfterReload: a reload that shrinks queue= below the
// number already waiting refuses new requests until enough have left for
// the new queue to have room: with 3 waiting and queue 1, until the third
// waiter leaves, not the first; the waiters ahead hold the exit for their
// own weights (1, 2 and 1 intervals).
func TestEdgeLeakyRetryAfterReload(t *testing.T) {
	store := memstore.New(memstore.Options{VirtualQueues: true})
	rate := limiter.Rate{N: 10, Per: time.Second}
	lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: rate, Queue: 3, MaxWait: time.Minute})
	l := edgeLimiter(t, store, lim, err)
	ctx := context.Background()
	ms := time.Millisecond
	for i, c := range []struct {
		n     int64
		delay time.Duration
	}{{1, 0}, {1, 100 * ms}, {2, 200 * ms}, {1, 400 * ms}} {
		if d, err := l.Allow(ctx, "k", edgeT0, c.n); err != nil || !d.Allowed || d.Delay != c.delay {
			t.Fatalf("request %d: %+v (%v), want a delay of %v", i, d, err, c.delay)
		}
	}
	lim, err = limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: rate, Queue: 1, MaxWait: time.Minute})
	l = edgeLimiter(t, store, lim, err)
	// Waiters leave at +100, +200 and +400 ms; queue 1 has room once all
	// three have.
	for _, at := range []time.Duration{50 * ms, 150 * ms, 250 * ms} {
		if d, err := l.Allow(ctx, "k", edgeT0.Add(at), 1); err != nil || d.Allowed || d.RetryAfter != 400*ms-at {
			t.Fatalf("at +%v after the reload: %+v (%v), want refused, Retry-After %v", at, d, err, 400*ms-at)
		}
	}
	if d, err := l.Allow(ctx, "k", edgeT0.Add(400*ms), 1); err != nil || !d.Allowed || d.Delay != 100*ms {
		t.Fatalf("at +400ms: %+v (%v), want queued for 100ms", d, err)
	}
}

// TestEdgeWaitDelayOnly: a Decision without a ticket (the Redis store's
// fallback) waits exactly its Delay on the clock, a nanosecond included,
// and one without a Delay returns at once, nil even if ctx has ended (the
// request may go on: it never waited).
func TestEdgeWaitDelayOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{})
		for _, d := range []time.Duration{time.Nanosecond, 5 * time.Second} {
			start := time.Now()
			if err := s.Wait(context.Background(), driver.Decision{Allowed: true, Delay: d}); err != nil || time.Since(start) != d {
				t.Fatalf("Delay %v: waited %v (%v)", d, time.Since(start), err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 64 { // a timer and an ended ctx both ready: select would pick at random
			for _, d := range []time.Duration{0, -time.Second} {
				if err := s.Wait(ctx, driver.Decision{Allowed: true, Delay: d}); err != nil {
					t.Fatalf("Delay %v, ctx ended: %v, want nil", d, err)
				}
			}
		}
	})
}

// TestEdgeLeakyGateLate: a request that arrives while the queue's timer is
// due but has not run yet (the instants given are ahead of the timer)
// takes its place after the exit reopens as of its arrival, and so does the
// schedule after it: without a clock, one spacing after each release. 1/s,
// queue 5.
func TestEdgeLeakyGateLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Queue: 5, MaxWait: time.Minute})
		l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
		ctx := context.Background()
		for i, c := range []struct {
			at, sleep, delay time.Duration
		}{
			{0, 0, 0},           // leaves at once
			{0, 0, time.Second}, // A waits: the exit reopens at +1s
			// B: the timer has not run; B leaves at +6s. Then sleep past A's
			// release (1s on the timer's clock; B's is 1s after it), so that
			// its timer has run before the next request whatever the order
			// of wake-ups.
			{5 * time.Second, 1500 * time.Millisecond, time.Second},
			// After A's release the exit reopens one spacing after B, at +7s.
			{5 * time.Second, 0, 2 * time.Second},
		} {
			d, err := l.Allow(ctx, "k", edgeT0.Add(c.at), 1)
			if err != nil || !d.Allowed || d.Delay != c.delay {
				t.Fatalf("request %d at +%v: %+v (%v), want a delay of %v", i, c.at, d, err, c.delay)
			}
			time.Sleep(c.sleep)
		}
	})
}

// TestEdgeLeakyCancelAsReleased: a waiter whose ctx ends just as the queue
// releases it leaves the places of those behind it as they were: the next
// is released on time. Virtual queues release on the instants given; Wait
// then sees both its release and its ctx's end (or only its ctx's end, if
// it runs before the release), and either answer is right, so the race is
// run many times.
func TestEdgeLeakyCancelAsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 5, MaxWait: time.Minute})
		l := edgeLimiter(t, memstore.New(memstore.Options{VirtualQueues: true}), lim, err)
		ms := time.Millisecond
		for i := range 32 {
			key := string(rune('a' + i))
			var ds [3]limiter.Decision
			for j := range ds {
				d, err := l.Allow(context.Background(), key, edgeT0, 1)
				if err != nil || !d.Allowed || d.Delay != time.Duration(j)*100*ms {
					t.Fatalf("request %d: %+v (%v)", j, d, err)
				}
				ds[j] = d
			}
			ctxB, cancelB := context.WithCancel(context.Background())
			go func() { _ = l.Wait(ctxB, ds[1]) }() // either answer is right
			ctxC, cancelC := context.WithCancel(context.Background())
			var cDone atomic.Bool
			go func() {
				if err := l.Wait(ctxC, ds[2]); err == nil {
					cDone.Store(true)
				}
			}()
			synctest.Wait()
			cancelB()
			// Releases B (due at +100 ms), unless B's Wait has already seen
			// its ctx end and left: then C moved up and is released now.
			// Either way the next request is queued behind C.
			if d, err := l.Allow(context.Background(), key, edgeT0.Add(100*ms), 1); err != nil || !d.Allowed || d.Delay != 200*ms && d.Delay != 100*ms {
				t.Fatalf("round %d at +100ms: %+v (%v), want queued behind C (200ms, or 100ms if B left first)", i, d, err)
			}
			synctest.Wait()
			_, _ = l.Allow(context.Background(), key, edgeT0.Add(200*ms), 1) // releases C
			synctest.Wait()
			if !cDone.Load() {
				cancelC()
				t.Fatalf("round %d: C not released at +200ms", i)
			}
			cancelC()
		}
	})
}

// TestEdgeLeakySweepAfterDrain: a key whose queue has drained is kept until
// the exit reopens after the last release (the queue's gate, later than
// the state's own schedule), and dropped from then on.
func TestEdgeLeakySweepAfterDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 5, MaxWait: time.Minute})
		store := memstore.New(memstore.Options{})
		l := edgeLimiter(t, store, lim, err)
		ms := time.Millisecond
		for j := range 2 { // one at once, one released at +100 ms
			if d, err := l.Allow(context.Background(), "k", edgeT0, 1); err != nil || d.Delay != time.Duration(j)*100*ms {
				t.Fatalf("request %d: %+v (%v)", j, d, err)
			}
		}
		time.Sleep(time.Second) // the queue releases and goes idle
		if n := store.Sweep(edgeT0.Add(150 * ms)); n != 0 || store.Len() != 1 {
			t.Fatalf("Sweep at +150ms dropped %d, want 0: the exit reopens at +200ms", n)
		}
		if n := store.Sweep(edgeT0.Add(200 * ms)); n != 1 {
			t.Fatalf("Sweep at +200ms dropped %d, want 1", n)
		}
	})
}

// TestEdgeLeakyHeavyWaiter: a waiter whose weight holds the exit for longer
// than a Duration can say (its spacing saturated) keeps everyone behind it
// out; once it gives up its place, the requests behind the others wait for
// those others' spacing exactly, as before it came. 1/hour, queue 5.
func TestEdgeLeakyHeavyWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Queue: 5, MaxWait: 3 * time.Hour})
		l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
		ctx := context.Background()
		var heavy limiter.Decision
		for i, c := range []struct {
			n     int64
			delay time.Duration
		}{{1, 0}, {1, time.Hour}, {1_000_000_000, 2 * time.Hour}} {
			d, err := l.Allow(ctx, "k", edgeT0, c.n)
			if err != nil || !d.Allowed || d.Delay != c.delay {
				t.Fatalf("request %d: %+v (%v), want a delay of %v", i, d, err, c.delay)
			}
			heavy = d
		}
		if d, err := l.Allow(ctx, "k", edgeT0, 1); err != nil || d.Allowed {
			t.Fatalf("behind the heavy waiter: %+v (%v), want refused", d, err)
		}
		gone, cancel := context.WithCancel(ctx)
		cancel()
		if err := l.Wait(gone, heavy); err == nil {
			t.Fatal("Wait with an ended ctx returned nil")
		}
		// Left: the second request, leaving at +1h; the next leaves at +2h.
		if d, err := l.Allow(ctx, "k", edgeT0, 1); err != nil || !d.Allowed || d.Delay != 2*time.Hour {
			t.Fatalf("after the heavy waiter left: %+v (%v), want a delay of 2h", d, err)
		}
	})
}

// TestEdgeLeakyHeavyReleased: once a waiter whose spacing saturates has
// left, the exit stays closed (for the largest Duration), on the timer's
// schedule as on the instants given: the next request is refused. 1/hour.
func TestEdgeLeakyHeavyReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Queue: 5, MaxWait: 3 * time.Hour})
		l := edgeLimiter(t, memstore.New(memstore.Options{}), lim, err)
		ctx := context.Background()
		for i, c := range []struct {
			n     int64
			delay time.Duration
		}{{1, 0}, {1_000_000_000, time.Hour}} {
			if d, err := l.Allow(ctx, "k", edgeT0, c.n); err != nil || !d.Allowed || d.Delay != c.delay {
				t.Fatalf("request %d: %+v (%v), want a delay of %v", i, d, err, c.delay)
			}
		}
		time.Sleep(time.Hour + time.Minute) // the heavy one is released at 1h, its timer run
		if d, err := l.Allow(ctx, "k", edgeT0.Add(time.Hour), 1); err != nil || d.Allowed {
			t.Fatalf("after the heavy one left: %+v (%v), want refused", d, err)
		}
	})
}
