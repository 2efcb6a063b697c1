package driver

import (
	"testing"
	"time"
)

// t0 is an arbitrary instant on a whole minute, so window edges are easy to
// read: t0 + 60s starts the next minute window.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// stepper applies one request to one key's state of a limit.
type stepper func(now time.Time, n int64) Decision

// newStepper returns a stepper over a fresh state of l, committing as a
// Store does (without a queue: a leaky bucket's direct releases only).
func newStepper(l Limit) stepper { return newKey(l).step }

// key is one client key's state of a limit, kept as a Store keeps it: in
// States the limit made.
type key struct {
	l  *Limit
	st States
}

func newKey(l Limit) *key { return &key{&l, l.NewStates(1)} }

func (k *key) step(now time.Time, n int64) Decision { return k.l.Step(k.st, 0, nil, now, n) }

func (k *key) peek(now time.Time, n int64) Decision { return k.l.Peek(k.st, 0, nil, now, n) }

func (k *key) charge(now, reservedAt time.Time, n int64) Decision {
	return k.l.Charge(k.st, 0, now, reservedAt, n)
}

func (k *key) idleAt() time.Time { return k.l.IdleAt(k.st, 0, nil) }

// clone returns a copy of k's state (sharing a sliding log's entries).
func (k *key) clone() *key {
	st := k.st.Make(1)
	st.Copy(0, k.st, 0)
	return &key{k.l, st}
}

// log returns a sliding log's state.
func (k *key) log() *slidingLogState { return &k.st.(array[slidingLogState])[0] }

// window returns a sliding window's state.
func (k *key) window() slidingWindowState { return k.l.a.(*slidingWindow).state(k.st, 0, nil) }

// step is one row of a step table: a request at t of weight n, and what the
// decision must be. retry and remaining are checked always; reset only when
// set.
type step struct {
	t         time.Duration
	n         int64
	allowed   bool
	retry     time.Duration
	remaining int64
	reset     time.Duration // from t0; 0 = not checked
}

func runSteps(t *testing.T, l Limit, steps []step) {
	t.Helper()
	do := newStepper(l)
	for i, st := range steps {
		n := st.n
		if n == 0 {
			n = 1
		}
		d := do(at(st.t), n)
		if d.Allowed != st.allowed || d.RetryAfter != st.retry || d.Remaining != st.remaining ||
			st.reset != 0 && !d.ResetAt.Equal(at(st.reset)) {
			t.Errorf("step %d: Allow(t0+%v, %d) = {allowed %v retry %v remaining %d reset t0+%v}, want {allowed %v retry %v remaining %d reset t0+%v}",
				i, st.t, n, d.Allowed, d.RetryAfter, d.Remaining, d.ResetAt.Sub(t0), st.allowed, st.retry, st.remaining, st.reset)
		}
	}
}

func mustLimit(t testing.TB) func(Limit, error) Limit {
	return func(l Limit, err error) Limit {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

const ms = time.Millisecond

func TestTokenBucketSteps(t *testing.T) {
	must := mustLimit(t)
	t.Run("burst 3 at 10/s", func(t *testing.T) {
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{10, time.Second}, Burst: 3}))
		runSteps(t, l, []step{
			{t: 0, allowed: true, remaining: 2, reset: 100 * ms},
			{t: 0, allowed: true, remaining: 1, reset: 200 * ms},
			{t: 0, allowed: true, remaining: 0, reset: 300 * ms},
			{t: 0, allowed: false, retry: 100 * ms, remaining: 0, reset: 300 * ms},
			{t: 99 * ms, allowed: false, retry: 1 * ms, remaining: 0},
			{t: 100 * ms, allowed: true, remaining: 0, reset: 400 * ms}, // exactly one token
			{t: 150 * ms, allowed: false, retry: 50 * ms, remaining: 0},
			{t: 10 * time.Second, allowed: true, remaining: 2, reset: 10*time.Second + 100*ms}, // refilled to burst, not beyond
		})
	})
	t.Run("burst 1", func(t *testing.T) {
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{2, time.Second}, Burst: 1}))
		runSteps(t, l, []step{
			{t: 0, allowed: true},
			{t: 1, allowed: false, retry: 500*ms - 1},
			{t: 500 * ms, allowed: true},
			{t: 999 * ms, allowed: false, retry: 1 * ms}, // 0.998 tokens
			{t: time.Second, allowed: true},
		})
	})
	t.Run("cost 3 of burst 5", func(t *testing.T) {
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 5, Cost: 3}))
		runSteps(t, l, []step{
			{t: 0, allowed: true, remaining: 2},
			{t: 0, allowed: false, retry: time.Second, remaining: 2}, // needs 3, has 2
			{t: time.Second, allowed: true, remaining: 0},
			{t: time.Second, n: 2, allowed: false, retry: Never, remaining: 0}, // weight 2 × cost 3 > burst 5
		})
	})
	t.Run("rate with no whole-nanosecond interval", func(t *testing.T) {
		// 3/s: one token per 333,333,333⅓ ns. Three tokens take exactly 1s.
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{3, time.Second}, Burst: 3}))
		runSteps(t, l, []step{
			{t: 0, n: 3, allowed: true},
			{t: 333333333, allowed: false, retry: 1, remaining: 0}, // 0.999999999 tokens
			{t: 333333334, allowed: true, remaining: 0},
			{t: 666666666, allowed: false, retry: 1}, // carried fraction is not lost
			{t: 666666667, allowed: true},
			{t: time.Second, allowed: true},
			{t: time.Second, allowed: false, retry: 333333334},
		})
	})
	t.Run("time going backwards", func(t *testing.T) {
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 2}))
		runSteps(t, l, []step{
			{t: 10 * time.Second, n: 2, allowed: true},
			// An earlier instant sees the state as of t0+10s: no refill, and
			// Retry-After counts from the earlier instant.
			{t: 5 * time.Second, allowed: false, retry: 6 * time.Second},
			{t: 11 * time.Second, allowed: true},
			// Refill between 10s and 11s was credited once, not again.
			{t: 11 * time.Second, allowed: false, retry: time.Second},
		})
	})
	t.Run("weight above burst is never admitted", func(t *testing.T) {
		l := must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 2}))
		runSteps(t, l, []step{
			{t: 0, n: 3, allowed: false, retry: Never},
			{t: 0, n: 2, allowed: true},
		})
	})
}

func TestFixedWindowSteps(t *testing.T) {
	must := mustLimit(t)
	l := must(NewFixedWindow(FixedWindowParams{Limit: 3, Window: time.Minute}))
	runSteps(t, l, []step{
		{t: 0, allowed: true, remaining: 2, reset: time.Minute},
		{t: 30 * time.Second, allowed: true, remaining: 1},
		{t: 59 * time.Second, allowed: true, remaining: 0},
		{t: time.Minute - 1, allowed: false, retry: 1, remaining: 0},
		{t: time.Minute, allowed: true, remaining: 2, reset: 2 * time.Minute}, // exact boundary: new window
		// Back in time into the previous window: counts in the newer one.
		{t: 59 * time.Second, allowed: true, remaining: 1, reset: 2 * time.Minute},
		{t: 61 * time.Second, n: 2, allowed: false, retry: 59 * time.Second, remaining: 1},
		{t: 61 * time.Second, allowed: true, remaining: 0},
	})
	cost := must(NewFixedWindow(FixedWindowParams{Limit: 5, Window: time.Second, Cost: 2}))
	runSteps(t, cost, []step{
		{t: 0, allowed: true, remaining: 3},
		{t: 0, allowed: true, remaining: 1},
		{t: 0, allowed: false, retry: time.Second, remaining: 1},
	})
}

func TestSlidingLogSteps(t *testing.T) {
	must := mustLimit(t)
	l := must(NewSlidingLog(SlidingLogParams{Limit: 3, Window: time.Minute}))
	runSteps(t, l, []step{
		{t: 0, allowed: true, remaining: 2, reset: time.Minute},
		{t: 10 * time.Second, allowed: true, remaining: 1},
		{t: 20 * time.Second, allowed: true, remaining: 0, reset: 80 * time.Second},
		{t: 30 * time.Second, allowed: false, retry: 30 * time.Second, remaining: 0},
		{t: time.Minute - 1, allowed: false, retry: 1},
		// (t−W, t]: the entry at t0 leaves exactly at t0+W.
		{t: time.Minute, allowed: true, remaining: 0},
		{t: time.Minute, n: 2, allowed: false, retry: 20 * time.Second}, // needs the two at 10s and 20s gone
		// Back in time: treated as the newest entry's instant.
		{t: 0, allowed: false, retry: 70 * time.Second},
		{t: 70 * time.Second, allowed: true, remaining: 0},
	})
}

func TestSlidingWindowSteps(t *testing.T) {
	must := mustLimit(t)
	t.Run("two windows", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 10, Window: time.Minute, Slots: 1}))
		runSteps(t, l, []step{
			{t: 30 * time.Second, n: 10, allowed: true, remaining: 0, reset: 2 * time.Minute},
			// Estimate 10 until the previous window weighs ≤ 9/10: at 1:06.
			{t: 59 * time.Second, allowed: false, retry: 7 * time.Second},
			// At 1:06 the previous window weighs (60−6)/60·10 = 9: admit one.
			{t: 66 * time.Second, allowed: true, remaining: 0},
			{t: 66 * time.Second, allowed: false, retry: 6 * time.Second},
			{t: 72 * time.Second, allowed: true, remaining: 0},
			// Next window: previous = 2 (1:06 and 1:12), weight (60−0)/60.
			{t: 120 * time.Second, n: 8, allowed: true, remaining: 0},
			{t: 120 * time.Second, allowed: false, retry: 30 * time.Second},
		})
	})
	t.Run("six slots", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 6, Window: time.Minute, Slots: 6}))
		runSteps(t, l, []step{
			{t: 0, n: 6, allowed: true, remaining: 0, reset: 70 * time.Second},
			// In slot 5 ([50s,60s)) the slot at [0,10s) is still wholly inside.
			// Slot 0 must weigh ≤ 5/6: from 70s − 8⅓s = 61⅔s, rounded up to the ns.
			{t: 55 * time.Second, allowed: false, retry: 6666666667},
			// At 61⅔s slot 0 weighs (70−61⅔)/10 = ⅚ of 6 = 5: one fits.
			{t: 61*time.Second + 666666667, allowed: true, remaining: 0},
			{t: 70 * time.Second, n: 5, allowed: true, remaining: 0},
		})
	})
	t.Run("backwards into an older slot", func(t *testing.T) {
		l := must(NewSlidingWindow(SlidingWindowParams{Limit: 2, Window: time.Second, Slots: 2}))
		runSteps(t, l, []step{
			{t: 1200 * ms, allowed: true, remaining: 1},
			{t: 100 * ms, allowed: true, remaining: 0}, // counts in slot [1s,1.5s)
			// Slot [1s,1.5s) holds 2: one fits once it weighs ≤ ½, at 2.25s.
			{t: 1400 * ms, allowed: false, retry: 850 * ms},
		})
	})
}

func TestParamErrors(t *testing.T) {
	sec := time.Second
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"zero rate", errOf(NewTokenBucket(TokenBucketParams{Rate: Rate{0, sec}, Burst: 1})), "token_bucket: rate: must be greater than zero"},
		{"zero period", errOf(NewTokenBucket(TokenBucketParams{Rate: Rate{1, 0}, Burst: 1})), "token_bucket: rate: period must be greater than zero"},
		{"zero burst", errOf(NewTokenBucket(TokenBucketParams{Rate: Rate{1, sec}})), "token_bucket: burst: must be at least 1"},
		{"cost above burst", errOf(NewTokenBucket(TokenBucketParams{Rate: Rate{1, sec}, Burst: 2, Cost: 3})), "token_bucket: cost: 3 is above burst 2, so no request could ever be admitted"},
		{"leaky zero rate", errOf(NewLeakyBucket(LeakyBucketParams{Rate: Rate{0, sec}})), "leaky_bucket: rate: must be greater than zero"},
		{"leaky negative queue", errOf(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, sec}, Queue: -1})), "leaky_bucket: queue: must not be negative"},
		{"fixed zero window", errOf(NewFixedWindow(FixedWindowParams{Limit: 1})), "fixed_window: window: must be greater than zero"},
		{"fixed cost above limit", errOf(NewFixedWindow(FixedWindowParams{Limit: 1, Window: sec, Cost: 2})), "fixed_window: cost: 2 is above limit 1, so no request could ever be admitted"},
		{"log too large", errOf(NewSlidingLog(SlidingLogParams{Limit: 100001, Window: sec})), "sliding_log: limit: 100001 is above the maximum of 100000: a sliding log keeps one timestamp per admitted request; use sliding_window for large limits"},
		{"slots zero", errOf(NewSlidingWindow(SlidingWindowParams{Limit: 1, Window: sec})), "sliding_window: slots: must be at least 1 (1 is the two-window approximation)"},
		{"slots uneven", errOf(NewSlidingWindow(SlidingWindowParams{Limit: 1, Window: sec, Slots: 7})), "sliding_window: slots: window 1s does not divide into 7 equal slots"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("%s: err = %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

func errOf(_ Limit, err error) error { return err }

// TestLeakyBucketStepsNoQueue: the leaky bucket's step without a store's
// queue (queue = 0, nginx's limit_req without burst): one request through
// per 1/r, the others rejected with Retry-After until the exit reopens;
// with a queue and no waiters yet, the next one is admitted with the wait
// until then. Waiting itself is the store's (memstore's queue tests).
func TestLeakyBucketStepsNoQueue(t *testing.T) {
	must := mustLimit(t)
	l := must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{10, time.Second}}))
	runSteps(t, l, []step{
		{t: 0, allowed: true, remaining: 0, reset: 100 * ms},
		{t: 0, allowed: false, retry: 100 * ms, reset: 100 * ms},
		{t: 40 * ms, allowed: false, retry: 60 * ms, reset: 100 * ms},
		{t: 100 * ms, allowed: true, remaining: 0, reset: 200 * ms},
		{t: 50 * ms, allowed: false, retry: 150 * ms, reset: 200 * ms}, // time going backwards
	})
	q := must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{10, time.Second}, Queue: 2, MaxWait: time.Second}))
	s := newKey(q)
	if d := s.step(at(0), 1); !d.Allowed || d.Delay != 0 {
		t.Fatalf("first: %+v", d)
	}
	if d := s.step(at(30*ms), 1); !d.Allowed || d.Delay != 70*ms || d.Remaining != 1 {
		t.Errorf("second, the exit closed: %+v, want admitted with Delay 70ms, remaining 1", d)
	}
}
