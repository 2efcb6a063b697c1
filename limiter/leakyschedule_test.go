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
// late does not delay those after it for good: they catch up with the
// schedule of one spacing after another, each at least 90% of a spacing
// after the one before, never before it is due; one that is overdue too
// leaves at once; a queue more than a spacing behind starts a new
// schedule. Without a clock, each release is timed from the previous one,
// so the lateness carries over to all that follow.
//
// Lateness is made by a clock that jumps ahead (by late) at 250 ms of
// the bubble's time: the release due at 300 ms then happens, on the
// clock, at 300 ms + late. Releases are recorded on that clock. Eight
// requests arrive at 0; a ninth joins the queue at 350 ms of the bubble's
// time, which must not move the schedule.
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
		{"late by 5ms", 5 * time.Millisecond, true, ms(0, 100, 200, 305, 400, 500, 600, 700, 800)},
		{"late by 30ms", 30 * time.Millisecond, true, ms(0, 100, 200, 330, 420, 510, 600, 700, 800)},
		{"late by 80ms", 80 * time.Millisecond, true, ms(0, 100, 200, 380, 470, 560, 650, 740, 830)},
		{"late by 130ms: the next overdue too", 130 * time.Millisecond, true, ms(0, 100, 200, 430, 430, 520, 610, 700, 800)},
		{"late by 230ms: a new schedule", 230 * time.Millisecond, true, ms(0, 100, 200, 530, 530, 630, 730, 830, 930)},
		{"no clock: timed from each release", 30 * time.Millisecond, false, ms(0, 100, 200, 330, 430, 530, 630, 730, 830)},
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
				arrive := func() {
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
				for range len(c.want) - 1 {
					arrive()
				}
				time.Sleep(250 * time.Millisecond)
				skew.Store(int64(c.late))
				time.Sleep(100 * time.Millisecond)
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
