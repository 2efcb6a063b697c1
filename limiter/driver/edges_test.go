package driver

import (
	"testing"
	"time"
)

// Edge tests of the algorithms' step functions: instants before 1970, long
// idles, charges of zero and back in time, and Peek agreeing with Step.
// Each asserts what docs/algorithms.md and the functions' docs define.

func sameDecision(a, b Decision) bool {
	return a.Allowed == b.Allowed && a.RetryAfter == b.RetryAfter && a.Remaining == b.Remaining &&
		a.Limit == b.Limit && a.ResetAt.Equal(b.ResetAt) && a.Next == b.Next && a.Capped == b.Capped
}

// TestEdgeSlidingWindowPeekIsStep: Peek returns exactly the decision Step
// returns (Next included: the state after an admission), for 1 slot, 6
// and the maximum, and leaves the state as it was.
func TestEdgeSlidingWindowPeekIsStep(t *testing.T) {
	must := mustLimit(t)
	for _, slots := range []int{1, 6, MaxSlots} {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 10, Window: 192 * time.Second, Slots: slots}))
		s := newKey(l)
		// Bursts, gaps of less than a slot, of several slots and of more
		// than the window, and one instant back in time.
		offs := []time.Duration{0, 0, 300 * ms, 3 * time.Second, 3 * time.Second, 20 * time.Second, 40 * time.Second,
			41 * time.Second, 10 * time.Second, 70 * time.Second, 90 * time.Second, 450 * time.Second, 451 * time.Second}
		for i, off := range offs {
			n := int64(1 + i%3)
			before := s.clone()
			peek := s.peek(at(off), n)
			if w, b := s.window(), before.window(); *w.Slot != *b.Slot || string(u32bytes(w.Counts)) != string(u32bytes(b.Counts)) {
				t.Fatalf("slots %d, step %d: Peek changed the state", slots, i)
			}
			step := s.step(at(off), n)
			if !sameDecision(peek, step) {
				t.Fatalf("slots %d, step %d (t0+%v, %d): Peek %+v, Step %+v", slots, i, off, n, peek, step)
			}
		}
	}
}

func u32bytes(c []uint32) []byte {
	b := make([]byte, 0, 4*len(c))
	for _, v := range c {
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return b
}

// TestEdgeSlidingWindowResetAt: ResetAt is when the state is fresh again —
// the decision's own instant for a state holding nothing (a fresh one, or
// one whose units have all left the window), and otherwise one window
// after the end of the newest slot holding units, whether the request was
// admitted or not. SlidingWindowIdleAt of a fresh state is the zero time.
func TestEdgeSlidingWindowResetAt(t *testing.T) {
	must := mustLimit(t)
	l := must(NewSlidingWindow(SlidingWindowParams{Limit: 6, Window: time.Minute, Slots: 6}))
	s := newKey(l)
	if at := s.idleAt(); !at.IsZero() {
		t.Fatalf("IdleAt of a fresh state = %v, want the zero time", at)
	}
	// A charge of nothing on a fresh state reports it fresh: ResetAt now.
	if d := s.charge(at(5*time.Second), at(5*time.Second), 0); !d.ResetAt.Equal(at(5*time.Second)) || d.Remaining != 6 {
		t.Fatalf("fresh state: %+v, want 6 left and ResetAt t0+5s", d)
	}
	if d := s.step(at(0), 6); !d.Allowed || !d.ResetAt.Equal(at(70*time.Second)) {
		t.Fatalf("6 at t0: %+v, want admitted, ResetAt t0+70s", d)
	}
	// Refused in slot 5: the newest slot holding units is still slot 0.
	if d := s.step(at(55*time.Second), 1); d.Allowed || !d.ResetAt.Equal(at(70*time.Second)) {
		t.Fatalf("refused at t0+55s: %+v, want ResetAt t0+70s (slot 0's units), not slot 5's", d)
	}
	if idle := s.idleAt(); !idle.Equal(at(70 * time.Second)) {
		t.Fatalf("IdleAt = %v, want t0+70s", idle)
	}
	// A charge of nothing in slot 3 reports slot 0's reset, not slot 3's.
	if d := s.charge(at(35*time.Second), at(35*time.Second), 0); !d.ResetAt.Equal(at(70 * time.Second)) {
		t.Fatalf("charge of 0 at t0+35s: %+v, want ResetAt t0+70s", d)
	}
	// Refund slot 0's units: nothing is held, ResetAt is the instant itself.
	if d := s.charge(at(30*time.Second), at(0), -6); d.Remaining != 6 || !d.ResetAt.Equal(at(30*time.Second)) {
		t.Fatalf("all refunded: %+v, want 6 left and ResetAt t0+30s", d)
	}
	if at := s.idleAt(); !at.IsZero() {
		t.Fatalf("IdleAt with every unit refunded = %v, want the zero time", at)
	}
}

// TestEdgeSlidingWindowCharges: a charge of zero writes nothing (the
// newest slot written does not move); a charge back in time goes to the
// reservation's slot and keeps the newer slots; a refund of a slot that
// holds nothing changes no counter, also when that slot's ring counter is
// shared with an older slot still in the window.
func TestEdgeSlidingWindowCharges(t *testing.T) {
	must := mustLimit(t)
	t.Run("zero", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 6, Window: time.Minute, Slots: 6}))
		s := newKey(l)
		s.step(at(0), 6)
		s.charge(at(75*time.Second), at(75*time.Second), 0)
		if want := nanos(at(0)) / int64(10*time.Second); *s.window().Slot != want {
			t.Fatalf("a charge of 0 moved the newest slot written to %d, want %d", *s.window().Slot, want)
		}
		// At +65s slot 0 still weighs ½: 3 units, and this request 1.
		if d := s.step(at(65*time.Second), 1); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("at t0+65s: %+v, want admitted with 2 left (slot 0 weighs ½)", d)
		}
	})
	t.Run("back in time", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 10, Window: time.Minute, Slots: 6}))
		s := newKey(l)
		s.charge(at(35*time.Second), at(35*time.Second), 4) // slot 3
		// Now +5s (slot 0) is read as slot 3; the reservation's slot 0 is
		// in that window: 2 more there, slot 3's 4 kept.
		if d := s.charge(at(5*time.Second), at(5*time.Second), 2); d.Remaining != 4 {
			t.Fatalf("charge back in time: %+v, want 4 left (4 in slot 3, 2 in slot 0)", d)
		}
		if want := nanos(at(35*time.Second)) / int64(10*time.Second); *s.window().Slot != want {
			t.Fatalf("newest slot written %d, want %d", *s.window().Slot, want)
		}
	})
	t.Run("before 1970", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 10, Window: time.Minute, Slots: 6}))
		s := newKey(l)
		// A fresh state is fresh at any instant, negative ones included.
		if d := s.charge(time.Unix(-35, 0), time.Unix(-35, 0), 4); d.Remaining != 6 || !d.ResetAt.Equal(time.Unix(30, 0)) {
			t.Fatalf("charge at −35s: %+v, want 6 left, ResetAt +30s", d)
		}
		if *s.window().Slot != -4 {
			t.Fatalf("newest slot written %d, want −4", *s.window().Slot)
		}
	})
	t.Run("refund of an empty slot", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 4, Window: time.Second, Slots: 2}))
		s := newKey(l)
		s.step(at(0), 2)      // slot 0
		s.step(at(600*ms), 1) // slot 1
		// Slot 3 holds nothing (its ring counter is slot 0's).
		before := s.clone()
		s.charge(at(1600*ms), at(1600*ms), -1)
		if *s.window().Slot != *before.window().Slot || string(u32bytes(s.window().Counts)) != string(u32bytes(before.window().Counts)) {
			t.Fatalf("refund of an empty slot changed the state: %v → %v", before.window().Counts, s.window().Counts)
		}
		// At +1.1s: slot 1's 1, slot 0's 2 weighing 0.8, and this 1: 3.6.
		if d := s.peek(at(1100*ms), 1); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("at t0+1.1s: %+v, want admitted with 0 left", d)
		}
	})
}

// TestEdgeSlidingWindowRetryBefore1970: the retry instant is exact at
// negative instants too: limit 1 used at the start of a window is free again
// once that window has wholly left, two windows on.
func TestEdgeSlidingWindowRetryBefore1970(t *testing.T) {
	must := mustLimit(t)
	l := must(NewSlidingWindow(SlidingWindowParams{Limit: 1, Window: time.Minute, Slots: 1}))
	s := newKey(l)
	t1 := time.Unix(-3600, 0)
	if d := s.step(t1, 1); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	if d := s.step(t1, 1); d.Allowed || d.RetryAfter != 2*time.Minute {
		t.Fatalf("second: %+v, want refused for 2m", d)
	}
}

// TestEdgeSlidingWindowLongIdle: a step after an idle far longer than the
// window, on 1 ns slots, is as quick as any other (the ring is cleared, not
// walked slot by slot) and finds the window empty.
func TestEdgeSlidingWindowLongIdle(t *testing.T) {
	must := mustLimit(t)
	l := must(NewSlidingWindow(SlidingWindowParams{Limit: 3, Window: 64, Slots: 64}))
	s := newKey(l)
	s.step(at(0), 3)
	for _, later := range []time.Time{at(50 * 365 * 24 * time.Hour), at(100 * 365 * 24 * time.Hour)} {
		if d := s.step(later, 1); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("after a long idle: %+v, want admitted with 2 left", d)
		}
		s.charge(later.Add(time.Hour), later.Add(time.Hour), 1)
	}
}

// TestEdgeLeakyBucketSpacingSaturates: the spacing of a weight is exact up
// to the largest Duration and saturates there, never wraps.
func TestEdgeLeakyBucketSpacingSaturates(t *testing.T) {
	must := mustLimit(t)
	l := must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1000, time.Second}})) // 1 ms apart
	const maxD = time.Duration(1<<63 - 1)
	n := int64(maxD / time.Millisecond) // the largest weight whose spacing fits
	if got, want := l.Spacing(n), time.Duration(n)*time.Millisecond; got != want {
		t.Fatalf("spacing of %d = %v, want %v", n, got, want)
	}
	for _, n := range []int64{n + 1, 1<<63 - 1} {
		if got := l.Spacing(n); got != maxD {
			t.Fatalf("spacing of %d = %v, want the largest Duration", n, got)
		}
	}
}

// TestEdgeFixedWindowChargeBefore1970: a fresh state is fresh at any
// instant: a charge at −35s counts in the window [−60s, 0).
func TestEdgeFixedWindowChargeBefore1970(t *testing.T) {
	must := mustLimit(t)
	l := must(NewFixedWindow(FixedWindowParams{Limit: 10, Window: time.Minute}))
	s := newKey(l)
	d := s.charge(time.Unix(-35, 0), time.Unix(-35, 0), 4)
	if d.Remaining != 6 || !d.ResetAt.Equal(time.Unix(0, 0)) {
		t.Fatalf("charge at −35s: %+v, want 6 left until the epoch", d)
	}
	if idle := s.idleAt(); !idle.Equal(time.Unix(0, 0)) {
		t.Fatalf("IdleAt = %v, want the epoch", idle)
	}
}

// TestEdgeSlidingLogLimitZero: a limit below 1 is refused as such (not as a
// cost above it).
func TestEdgeSlidingLogLimitZero(t *testing.T) {
	for _, limit := range []int64{0, -1} {
		_, err := NewSlidingLog(SlidingLogParams{Limit: limit, Window: time.Minute})
		if err == nil || err.Error() != "sliding_log: limit: must be at least 1" {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
}

// TestEdgeChargeSlidingLogOneEntry: with a single entry in the log, a charge
// at an earlier instant is read at that entry's instant (as Decide reads
// it): a reservation that has left the window as of then is charged there.
func TestEdgeChargeSlidingLogOneEntry(t *testing.T) {
	must := mustLimit(t)
	l := must(NewSlidingLog(SlidingLogParams{Limit: 10, Window: time.Minute}))
	s := newKey(l)
	s.step(at(100*time.Second), 1)
	// Now +30s is read as +100s; the reservation at +20s is before the
	// window (+40s, +100s], so the 2 units count at +100s.
	d := s.charge(at(30*time.Second), at(20*time.Second), 2)
	if d.Remaining != 7 || s.log().count != 3 || s.log().at(0) != nanos(at(100*time.Second)) {
		t.Fatalf("charge back in time: %+v, log %v, want 3 entries at +100s", d, s.log().ring)
	}
}
