package poll

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestUntil: the condition is called at once, then after pauses of 1, 2,
// 4 … 25 ms; Until returns as soon as it holds, or false at the timeout
// without a pause past it.
func TestUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var calls []time.Duration
		ok := Until(time.Second, func() bool {
			calls = append(calls, time.Since(start))
			return len(calls) == 8
		})
		want := []time.Duration{0, 1, 3, 7, 15, 31, 56, 81}
		if !ok || len(calls) != len(want) {
			t.Fatalf("Until = %v after calls at %v, want true after 8", ok, calls)
		}
		for i, w := range want {
			if calls[i] != w*time.Millisecond {
				t.Errorf("call %d at %v, want %v", i, calls[i], w*time.Millisecond)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var n atomic.Int64
		if Until(100*time.Millisecond, func() bool { n.Add(1); return false }) {
			t.Fatal("Until reported true for a condition that never holds")
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("gave up after %v, want the 100ms timeout", d)
		}
		if n.Load() < 2 {
			t.Errorf("condition called %d times", n.Load())
		}
	})
}
