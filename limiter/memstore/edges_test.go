package memstore_test

// Edges of the leaky-bucket queue that the conformance suite does not
// reach: the schedule after the queue drained, with delay=, and a reload
// that shrinks queue= below the number already waiting. Virtual queues
// release on the instants given, so nothing sleeps.

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
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
