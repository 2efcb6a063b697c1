package driver

import (
	"testing"
	"time"
)

// maxInWindow returns the most admissions in any interval (t−w, t].
func maxInWindow(admitted []int64, w int64) int {
	best, lo := 0, 0
	for hi, t := range admitted {
		for admitted[lo] <= t-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// steady returns arrival instants at a constant rate: perWindow arrivals
// per window w, for windows windows.
func steady(perWindow, windows int, w time.Duration) []time.Time {
	var ts []time.Time
	step := w / time.Duration(perWindow)
	for i := range perWindow * windows {
		ts = append(ts, t0.Add(time.Duration(i)*step+step/3))
	}
	return ts
}

// TestSlidingWindowSteadyOverLimit sends steady traffic at 10× the limit
// and measures the most admissions in any window. On steady traffic the
// defined estimate (docs/algorithms.md) holds every window to the limit
// (the overshoot the doc comment of SlidingWindowParams allows needs a
// burst at a slot's end).
func TestSlidingWindowSteadyOverLimit(t *testing.T) {
	const limit, windows = 600, 20
	w := time.Minute
	arrivals := steady(10*limit, windows, w)
	for _, slots := range []int{1, 6} {
		l := mustLimit(t)(NewSlidingWindow(SlidingWindowParams{Limit: limit, Window: w, Slots: slots}))
		do := newStepper(l)
		var admitted []int64
		for _, at := range arrivals {
			if do(at, 1).Allowed {
				admitted = append(admitted, at.UnixNano())
			}
		}
		worst := maxInWindow(admitted, int64(w))
		t.Logf("slots=%d: %d admitted over %d windows (%.3f per window), at most %d in any window (limit %d)",
			slots, len(admitted), windows, float64(len(admitted))/windows, worst, limit)
		if worst > limit {
			t.Errorf("slots=%d: %d admitted in one window of steady traffic, above the limit %d", slots, worst, limit)
		}
		if avg := len(admitted) / windows; avg > limit+1 {
			t.Errorf("slots=%d: %d admitted per window on average, want at most the limit %d", slots, avg, limit)
		}
	}
}
