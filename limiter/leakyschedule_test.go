package limiter

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestLeakyBucketKeepsSchedule: with a clock, a release the timer makes
// late does not delay those after it: they stay on the schedule of one
// spacing after another, never earlier; one that is overdue too leaves at
// once, and the schedule restarts from there. Without a clock, each
// release is timed from the previous one, so the lateness carries over to
// all that follow.
//
// Lateness is made by a clock that jumps ahead (by late) at 250 ms of
// the bubble's time: the release due at 300 ms then happens, on the
// clock, at 300 ms + late. Releases are recorded on that clock.
func TestLeakyBucketKeepsSchedule(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, c := range []struct {
		name      string
		late      time.Duration
		withClock bool
		want      []time.Duration
	}{
		{"late by 30ms", 30 * time.Millisecond, true, ms(0, 100, 200, 330, 400, 500, 600, 700)},
		{"late by 80ms", 80 * time.Millisecond, true, ms(0, 100, 200, 380, 400, 500, 600, 700)},
		{"late by 130ms: the next overdue too", 130 * time.Millisecond, true, ms(0, 100, 200, 430, 430, 530, 630, 730)},
		{"no clock: timed from each release", 30 * time.Millisecond, false, ms(0, 100, 200, 330, 430, 530, 630, 730)},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, err := NewLeakyBucket(LeakyBucketParams{Rate: Rate{N: 10, Per: time.Second}, Queue: 20, MaxWait: time.Minute})
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
				var mu sync.Mutex
				var s LeakyBucketState
				var got []time.Duration
				var gotMu sync.Mutex
				var wg sync.WaitGroup
				for range len(c.want) {
					mu.Lock()
					d := l.StepLeakyBucket(&s, &mu, queueClock, clock(), 1, true)
					mu.Unlock()
					if !d.Allowed {
						t.Fatalf("rejected: %+v", d)
					}
					wg.Go(func() {
						if err := d.Wait(context.Background()); err != nil {
							t.Error(err)
						}
						gotMu.Lock()
						got = append(got, clock().Sub(start))
						gotMu.Unlock()
					})
				}
				time.Sleep(250 * time.Millisecond)
				skew.Store(int64(c.late))
				wg.Wait()
				slices.Sort(got)
				if !slices.Equal(got, c.want) {
					t.Errorf("released at %v, want %v", got, c.want)
				}
			})
		})
	}
}
