package loadgen

import (
	"testing"
	"time"
)

func TestInstant(t *testing.T) {
	for _, c := range []struct {
		i    int
		rate float64
		want time.Duration
	}{
		{0, 1000, 0},
		{1, 1000, time.Millisecond},
		{2000, 1000, 2 * time.Second},
		{1, 3000, 333333 * time.Nanosecond},
		{3, 3000, time.Millisecond},                     // no drift from adding 333.333 µs three times
		{2999999, 3000, 999999666667 * time.Nanosecond}, // nor after a long run
		{1, 0.5, 2 * time.Second},
	} {
		if got := Instant(c.i, c.rate); got != c.want {
			t.Errorf("Instant(%d, %v) = %v, want %v", c.i, c.rate, got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		rate float64
		want int
	}{
		{0, 1000, 0},
		{time.Nanosecond, 1000, 1},  // the instant at 0
		{time.Millisecond, 1000, 1}, // 0 only: 1 ms is not before 1 ms
		{time.Millisecond + 1, 1000, 2},
		{2 * time.Second, 1000, 2000},
		{250 * time.Millisecond, 4000, 1000},
		{time.Second, 3000, 3000},
		{time.Second, 0.5, 1},
	} {
		got := Count(c.d, c.rate)
		if got != c.want {
			t.Errorf("Count(%v, %v) = %d, want %d", c.d, c.rate, got, c.want)
		}
		// By definition: every instant before got is before d, got's is not.
		if got > 0 && Instant(got-1, c.rate) >= c.d || Instant(got, c.rate) < c.d {
			t.Errorf("Count(%v, %v) = %d: not the first instant at or after d", c.d, c.rate, got)
		}
	}
}
