package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// TestVirtualQueues: with VirtualQueues a leaky bucket's queue releases
// its waiters on the instants decisions give, as a timer firing on time
// would: at 10/s with a queue of 2, requests at 0, 10, 20 and 30 ms are
// let through, queued for 90 and 180 ms, and refused (full); at 100 ms the
// first waiter has left, so one more is queued (for 200 ms, behind the
// other), and nobody ever calls Wait.
func TestVirtualQueues(t *testing.T) {
	lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 2, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(New(Options{VirtualQueues: true}), "p", lim)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		at      time.Duration
		allowed bool
		delay   time.Duration
	}{
		{0, true, 0},
		{10 * time.Millisecond, true, 90 * time.Millisecond},
		{20 * time.Millisecond, true, 180 * time.Millisecond},
		{30 * time.Millisecond, false, 0},
		{100 * time.Millisecond, true, 200 * time.Millisecond},
		{110 * time.Millisecond, false, 0},
	} {
		d, err := l.Allow(context.Background(), "k", t0.Add(c.at), 1)
		if err != nil || d.Allowed != c.allowed || d.Delay != c.delay {
			t.Fatalf("at %v: allowed %v delay %v (%v), want %v %v", c.at, d.Allowed, d.Delay, err, c.allowed, c.delay)
		}
	}
}
