package memstore_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// TestLeakyBucketKeepsSchedule: with a clock, a release the timer makes
// late does not delay those after it for good: they catch up with the
// schedule of one spacing after another, each at least 90% of a spacing
// after the one before, never before it is due; one that is overdue too
// leaves at once; a queue more than a spacing behind starts a new
// schedule. Without a clock, each release is timed from the previous one,
// so the lateness carries over to all that follow.
//
// Lateness is made by a clock that jumps ahead (by late) at 2.5 spacings
// of the bubble's time: the release due at 3 spacings then happens, on the
// clock, that much later. Releases are recorded on that clock. Eight
// requests arrive at 0; a ninth arrives at 3.5 spacings of the bubble's
// time, which must not move the schedule. At 1000/s a spacing is shorter
// than timers' routine lateness, and a queue a few milliseconds behind
// catches up rather than restarting (it would lose the rate under a busy
// neighbour: measured 980–987/s instead of 1000/s).
func TestLeakyBucketKeepsSchedule(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*float64(time.Millisecond)))
		}
		return d
	}
	const slow, fast = 100 * time.Millisecond, time.Millisecond
	for _, c := range []struct {
		name      string
		spacing   time.Duration
		late      time.Duration
		withClock bool
		want      []time.Duration
	}{
		{"late by 5ms", slow, 5 * time.Millisecond, true, ms(0, 100, 200, 305, 400, 500, 600, 700, 800)},
		{"late by 30ms", slow, 30 * time.Millisecond, true, ms(0, 100, 200, 330, 420, 510, 600, 700, 800)},
		{"late by 80ms", slow, 80 * time.Millisecond, true, ms(0, 100, 200, 380, 470, 560, 650, 740, 830)},
		{"late by 130ms: the next overdue too", slow, 130 * time.Millisecond, true, ms(0, 100, 200, 430, 430, 520, 610, 700, 800)},
		{"late by 200ms, a spacing behind: still overdue", slow, 200 * time.Millisecond, true, ms(0, 100, 200, 500, 500, 500, 600, 700, 800)},
		{"late by 230ms: a new schedule", slow, 230 * time.Millisecond, true, ms(0, 100, 200, 530, 530, 630, 730, 830, 930)},
		{"1000/s, late by 5ms: catches up at once", fast, 5 * time.Millisecond, true, ms(0, 1, 2, 8, 8, 8, 8, 8, 8.5)},
		{"1000/s, late by 11ms, timerSlack behind: catches up", fast, 11 * time.Millisecond, true, ms(0, 1, 2, 14, 14, 14, 14, 14, 14.5)},
		{"1000/s, late by 15ms: a new schedule", fast, 15 * time.Millisecond, true, ms(0, 1, 2, 18, 18, 19, 20, 21, 22)},
		{"no clock: timed from each release", slow, 30 * time.Millisecond, false, ms(0, 100, 200, 330, 430, 530, 630, 730, 830)},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: c.spacing}, Queue: 20, MaxWait: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				var skew atomic.Int64
				clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
				var queueClock func() time.Time
				if c.withClock {
					queueClock = clock
				}
				l, err := limiter.New(memstore.New(memstore.Options{Clock: queueClock}), "p", lim)
				if err != nil {
					t.Fatal(err)
				}
				var got []time.Duration
				var gotMu sync.Mutex
				var wg sync.WaitGroup
				arrive := func() {
					d, _ := l.Allow(context.Background(), "k", clock(), 1)
					if !d.Allowed {
						t.Fatalf("rejected: %+v", d)
					}
					wg.Go(func() {
						if err := l.Wait(context.Background(), d); err != nil {
							t.Error(err)
						}
						gotMu.Lock()
						got = append(got, clock().Sub(start))
						gotMu.Unlock()
					})
				}
				for range len(c.want) - 1 {
					arrive()
				}
				time.Sleep(c.spacing * 5 / 2)
				skew.Store(int64(c.late))
				time.Sleep(c.spacing)
				arrive()
				wg.Wait()
				slices.Sort(got)
				if !slices.Equal(got, c.want) {
					t.Errorf("released at %v, want %v", got, c.want)
				}
			})
		})
	}
}

// TestLeakyBucketMinGapLongSpacing: the 90% minimum gap after a late release
// holds for spacings of years too (90% of the spacing, not of a saturated
// product), to the nanosecond. One request per 4 years (and 99 ns); the
// second is released 2 years late on the clock, so the third, due 2 years
// after that, waits 90% of a spacing.
func TestLeakyBucketMinGapLongSpacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const year = 365 * 24 * time.Hour
		spacing := 4*year + 99 // not a whole number of hundreds of ns: 90% rounds down
		lim, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: spacing}, Queue: 5, MaxWait: 3 * spacing})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var skew atomic.Int64
		clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		l, err := limiter.New(memstore.New(memstore.Options{Clock: clock}), "p", lim)
		if err != nil {
			t.Fatal(err)
		}
		var got []time.Duration
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 3 {
			d, _ := l.Allow(context.Background(), "k", clock(), 1)
			if !d.Allowed {
				t.Fatalf("rejected: %+v", d)
			}
			wg.Go(func() {
				if err := l.Wait(context.Background(), d); err != nil {
					t.Error(err)
				}
				mu.Lock()
				got = append(got, clock().Sub(start))
				mu.Unlock()
			})
		}
		time.Sleep(spacing / 2)
		skew.Store(int64(2 * year))
		wg.Wait()
		slices.Sort(got)
		want := []time.Duration{0, spacing + 2*year, spacing + 2*year + spacing*9/10}
		if !slices.Equal(got, want) {
			t.Errorf("released at %v, want %v", got, want)
		}
	})
}
