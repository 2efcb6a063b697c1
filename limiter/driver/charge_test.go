package driver

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// TestChargeBackwards: charges at instants earlier than a state has seen
// follow Decide's rule (the latest instant seen), and refunds whose
// reservation cannot be placed in what the state still counts give
// nothing back.
func TestChargeBackwards(t *testing.T) {
	must := mustLimit(t)
	t.Run("token_bucket", func(t *testing.T) {
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 10}))
		s := newKey(l)
		s.charge(at(10*time.Second), at(0), 10) // empty at +10s
		// At +5s: read as +10s, no refill credited (or taken) twice.
		if d := s.charge(at(5*time.Second), at(0), 2); d.Remaining != 0 || d.Next != 3*time.Second+5*time.Second {
			t.Fatalf("charge 5s back: %+v, want −2 tokens as of +10s: one back at +13s", d)
		}
		if d := s.charge(at(12*time.Second), at(0), 0); d.Remaining != 0 || d.Next != time.Second {
			t.Fatalf("at +12s: %+v, want 0 tokens, one more at +13s", d)
		}
	})
	t.Run("fixed_window", func(t *testing.T) {
		l := must(NewFixedWindow(FixedWindowParams{Limit: 10, Window: time.Minute}))
		s := newKey(l)
		s.charge(at(70*time.Second), at(70*time.Second), 4) // window 1
		// A charge in window 0's time counts in window 1, as Decide does.
		if d := s.charge(at(30*time.Second), at(30*time.Second), 2); d.Remaining != 4 {
			t.Fatalf("charge in an earlier window: %+v, want 6 in window 1", d)
		}
		// A refund whose reservation instant is in window 0 (or after a
		// now in window 0) gives nothing back.
		for _, c := range []struct{ now, reserved time.Duration }{{30 * time.Second, 30 * time.Second}, {30 * time.Second, 70 * time.Second}, {80 * time.Second, 30 * time.Second}} {
			if d := s.charge(at(c.now), at(c.reserved), -5); d.Remaining != 4 {
				t.Fatalf("refund at +%v reserved at +%v: %+v, want nothing back", c.now, c.reserved, d)
			}
		}
		if d := s.charge(at(80*time.Second), at(70*time.Second), -5); d.Remaining != 9 {
			t.Fatalf("refund in window 1: %+v, want 5 back", d)
		}
	})
	t.Run("sliding_window", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 10, Window: time.Minute, Slots: 6}))
		s := newKey(l)
		s.charge(at(35*time.Second), at(35*time.Second), 4) // slot 3
		// A reservation after now is read as now: slot 3.
		if d := s.charge(at(35*time.Second), at(55*time.Second), -1); d.Remaining != 7 {
			t.Fatalf("refund reserved after now: %+v, want one back from slot 3", d)
		}
		// Now in slot 0, before the newest slot written (3): the
		// reservation's slot 0 holds nothing.
		if d := s.charge(at(5*time.Second), at(5*time.Second), -3); d.Remaining != 7 {
			t.Fatalf("refund back in time: %+v, want nothing back", d)
		}
		if d := s.charge(at(40*time.Second), at(15*time.Second), -3); d.Remaining != 7 {
			t.Fatalf("refund of a slot holding nothing: %+v, want nothing back", d)
		}
	})
	t.Run("sliding_log", func(t *testing.T) {
		l := must(NewSlidingLog(SlidingLogParams{Limit: 10, Window: time.Minute}))
		s := newKey(l)
		s.charge(at(30*time.Second), at(30*time.Second), 3)
		// Now at +10s, before the newest entry (+30s): the reservation
		// at +8s is in the window, and its entries go before +30s's.
		if d := s.charge(at(10*time.Second), at(8*time.Second), 2); d.Remaining != 5 || d.Next != 58*time.Second {
			t.Fatalf("charge back in time: %+v, want 5 left, the first at +8s leaving at +68s", d)
		}
		if s.log().at(0) != nanos(at(8*time.Second)) || s.log().at(2) != nanos(at(30*time.Second)) {
			t.Fatalf("log out of order: %v", s.log().ring)
		}
		// A reservation after now is read as now: +10s, no entry at or
		// after it but +30s's, the oldest of which go.
		if d := s.charge(at(10*time.Second), at(50*time.Second), -2); d.Remaining != 7 {
			t.Fatalf("refund reserved after now: %+v, want two back", d)
		}
		if s.log().count != 3 || s.log().at(2) != nanos(at(30*time.Second)) {
			t.Fatalf("log after the refund: %d entries %v", s.log().count, s.log().ring)
		}
	})
}

// TestChargeUnits: |n| bounded, MinInt64 included.
func TestChargeUnits(t *testing.T) {
	for _, c := range []struct{ n, bound, want int64 }{
		{5, 10, 5}, {-5, 10, 5}, {11, 10, 10}, {math.MaxInt64, 10, 10}, {math.MinInt64, 10, 10}, {0, 10, 0},
	} {
		if got := chargeUnits(c.n, c.bound); got != c.want {
			t.Errorf("chargeUnits(%d, %d) = %d, want %d", c.n, c.bound, got, c.want)
		}
	}
}

// TestDecisionSize: Capped lives in the padding after Allowed.
func TestDecisionSize(t *testing.T) {
	if got := unsafe.Sizeof(Decision{}); got != 80 {
		t.Errorf("a Decision is %d bytes, want 80", got)
	}
}

// TestChargeFreshNil: a nil States is a fresh key's state: a refund reads
// it as it is, a charge applies to a state of its own (for a Store that
// does not keep the key), and neither is refused.
func TestChargeFreshNil(t *testing.T) {
	must := mustLimit(t)
	for _, l := range []Limit{
		must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 10})),
		must(NewFixedWindow(FixedWindowParams{Limit: 10, Window: time.Minute})),
		must(NewSlidingLog(SlidingLogParams{Limit: 10, Window: time.Minute})),
		must(NewSlidingWindow(SlidingWindowParams{Limit: 10, Window: time.Minute, Slots: 6})),
	} {
		if d := l.Charge(nil, 0, at(0), at(0), -3); !d.Allowed || d.Remaining != 10 {
			t.Errorf("%v: refund to nil: %+v, want a fresh key's 10", l, d)
		}
		if d := l.Charge(nil, 0, at(0), at(0), 1); !d.Allowed || d.Remaining != 9 {
			t.Errorf("%v: charge to nil: %+v, want 9 left", l, d)
		}
	}
}
