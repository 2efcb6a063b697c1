package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// RunCharge checks charging after the fact (driver.Charger):
// debt and its Retry-After for every algorithm, refunds capped at a fresh
// key's state and doing nothing once the reservation has left the window,
// the debt bound, random interleavings of decisions and charges against
// the models of model.go, concurrent charges losing no unit, and
// reserve-then-reconcile ending as if the true cost had been decided.
// newStore's stores must implement driver.Charger. All instants are
// exact; nothing sleeps.
func RunCharge(t *testing.T, newStore NewStore, o Options) {
	t.Run("Debt", func(t *testing.T) { chargeDebt(t, newStore, o) })
	t.Run("Model", func(t *testing.T) { chargeModelTraces(t, newStore, o) })
	t.Run("Concurrent", func(t *testing.T) { chargeConcurrent(t, newStore) })
	t.Run("Reconcile", func(t *testing.T) { chargeReconcile(t, newStore) })
	t.Run("Keys", func(t *testing.T) { chargeKeys(t, newStore, o) })
	t.Run("Bounds", func(t *testing.T) { chargeBounds(t, newStore, o) })
	t.Run("WindowLimitBounds", func(t *testing.T) { windowLimitBounds(t, newStore) })
}

// chargeStep is one row of a charge table: Allow(n) at t (op 'a'), or
// Charge(n) at t for a reservation at reserved (op 'c'), and what the
// Decision must say. next < 0 is not checked.
type chargeStep struct {
	op        byte
	t         time.Duration // from the table's start
	n         int64
	reserved  time.Duration // charges: from the table's start
	allowed   bool          // charges: always true
	retry     time.Duration
	remaining int64
	next      time.Duration
	capped    bool
}

func runChargeSteps(t *testing.T, store limiter.Store, res time.Duration, name string, lim limiter.Limit, steps []chargeStep) {
	t.Helper()
	l := mustNew(t, store, name, lim)
	ctx := context.Background()
	start := time.Unix(0, base)
	for i, st := range steps {
		now := start.Add(st.t)
		var (
			d   limiter.Decision
			err error
			op  string
		)
		if st.op == 'a' {
			op = fmt.Sprintf("Allow(t+%v, %d)", st.t, st.n)
			d, err = l.Allow(ctx, "k", now, st.n)
		} else {
			op = fmt.Sprintf("Charge(t+%v, reserved t+%v, %d)", st.t, st.reserved, st.n)
			d, err = l.Charge(ctx, "k", now, start.Add(st.reserved), st.n)
			st.allowed = true
		}
		if err != nil {
			t.Fatalf("%v step %d: %s: %v", lim, i, op, err)
		}
		retry := time.Duration(ceilTo(int64(st.retry), int64(res)))
		nxt := time.Duration(ceilTo(int64(st.next), int64(res)))
		if d.Allowed != st.allowed || d.RetryAfter != retry || d.Remaining != st.remaining ||
			st.next >= 0 && d.Next != nxt || d.Capped != st.capped {
			t.Errorf("%v step %d: %s = {allowed %v retry %v remaining %d next %v capped %v}, want {allowed %v retry %v remaining %d next %v capped %v}",
				lim, i, op, d.Allowed, d.RetryAfter, d.Remaining, d.Next, d.Capped, st.allowed, retry, st.remaining, nxt, st.capped)
		}
	}
}

// chargeDebt: each algorithm charged past its quota, its Retry-After, the
// debt bound, and refunds.
func chargeDebt(t *testing.T, newStore NewStore, o Options) {
	m := must(t)
	res := max(o.Resolution, 1)
	store := newStore(t)
	const s = time.Second
	t.Run("token_bucket", func(t *testing.T) {
		// Burst 10 at 1 token/s.
		lim := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: s}, Burst: 10}))
		runChargeSteps(t, store, res, "debt-tb", lim, []chargeStep{
			{op: 'a', t: 0, n: 1, allowed: true, remaining: 9, next: s},
			{op: 'c', t: 0, n: 15, remaining: 0, next: 7 * s},                     // 9 − 15 = −6
			{op: 'a', t: 0, n: 1, retry: 7 * s, remaining: 0, next: 7 * s},        // (1 − (−6)) / 1/s
			{op: 'a', t: 6 * s, n: 1, retry: s, remaining: 0, next: s},            // at 0 tokens
			{op: 'a', t: 7 * s, n: 1, allowed: true, remaining: 0, next: s},       // the debt paid
			{op: 'c', t: 7 * s, n: 100, remaining: 0, next: 11 * s, capped: true}, // 0 − 100 stops at −10
			{op: 'a', t: 7 * s, n: 1, retry: 11 * s, remaining: 0, next: 11 * s},
			{op: 'c', t: 7 * s, n: -3, remaining: 0, next: 8 * s}, // −7
			{op: 'c', t: 7 * s, n: -100, remaining: 10, next: 0},  // capped at the burst
			{op: 'c', t: 7 * s, n: 0, remaining: 10, next: 0},     // nothing
			{op: 'a', t: 7 * s, n: 1, allowed: true, remaining: 9, next: s},
			// Half a token of refill: the bound counts whole tokens, so
			// the content stops at −10 + 0.5.
			{op: 'c', t: 7*s + 500*time.Millisecond, n: 50, remaining: 0, next: 10*s + 500*time.Millisecond, capped: true},
		})
	})
	t.Run("fixed_window", func(t *testing.T) {
		lim := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 10, Window: time.Minute}))
		runChargeSteps(t, store, res, "debt-fw", lim, []chargeStep{
			{op: 'a', t: 10 * s, n: 5, allowed: true, remaining: 5, next: 50 * s},
			{op: 'c', t: 20 * s, reserved: 10 * s, n: 8, remaining: 0, next: 40 * s}, // 13 of 10
			{op: 'a', t: 30 * s, n: 1, retry: 30 * s, remaining: 0, next: 30 * s},
			{op: 'c', t: 30 * s, reserved: 10 * s, n: 10, remaining: 0, next: 30 * s, capped: true}, // 20 at most
			{op: 'c', t: 30 * s, reserved: 10 * s, n: -9, remaining: 0, next: 30 * s},               // 11
			{op: 'c', t: 30 * s, reserved: 10 * s, n: -2, remaining: 1, next: 30 * s},               // 9
			{op: 'a', t: 60 * s, n: 1, allowed: true, remaining: 9, next: 60 * s},                   // the debt ends with its window
			{op: 'c', t: 61 * s, reserved: 59 * s, n: -5, remaining: 9, next: 59 * s},               // its window has ended: nothing
			{op: 'c', t: 61 * s, reserved: 60 * s, n: -5, remaining: 10, next: 0},                   // never below zero
			// A charge whose reservation's window has ended counts in the
			// current one.
			{op: 'c', t: 125 * s, reserved: 100 * s, n: 4, remaining: 6, next: 55 * s},
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		// Six slots of 10s.
		lim := m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 10, Window: time.Minute, Slots: 6}))
		runChargeSteps(t, store, res, "debt-sw", lim, []chargeStep{
			{op: 'a', t: 5 * s, n: 4, allowed: true, remaining: 6, next: -1},
			// Into the reservation's slot 0: 15 units. They weigh 15·(70−t)/10
			// once slot 0 is the oldest, ≤ 9 (one more fits) from t = 64s.
			{op: 'c', t: 25 * s, reserved: 5 * s, n: 11, remaining: 0, next: 39 * s},
			{op: 'a', t: 25 * s, n: 1, retry: 39 * s, remaining: 0, next: 39 * s},
			{op: 'a', t: 64 * s, n: 1, allowed: true, remaining: 0, next: -1},
			// Slot 0 has left the window at 70s: nothing to refund.
			{op: 'c', t: 70 * s, reserved: 5 * s, n: -5, remaining: 9, next: 60 * s},
			// The slots held (slot 6's 1) up to 20: 19 into slot 7.
			{op: 'c', t: 70 * s, reserved: 70 * s, n: 100, remaining: 0, next: -1, capped: true},
			// 15 left in slot 7: ≤ 9 from 134s (15·(140−t)/10).
			{op: 'c', t: 75 * s, reserved: 70 * s, n: -4, remaining: 0, next: 59 * s},
			// The reservation's slot left the window: the current one.
			// 3 in slot 20: 8 fit once they weigh ≤ 2: 3·(270−t)/10 ≤ 2.
			{op: 'c', t: 200 * s, reserved: 70 * s, n: 3, remaining: 7, next: 63*s + 333333334},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		lim := m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 5, Window: time.Minute}))
		runChargeSteps(t, store, res, "debt-sl", lim, []chargeStep{
			{op: 'a', t: 0, n: 2, allowed: true, remaining: 3, next: 60 * s},
			{op: 'c', t: 10 * s, reserved: 0, n: 6, remaining: 0, next: 50 * s}, // 8 entries at 0
			{op: 'a', t: 20 * s, n: 1, retry: 40 * s, remaining: 0, next: 40 * s},
			{op: 'a', t: 60 * s, n: 1, allowed: true, remaining: 4, next: 60 * s},
			{op: 'c', t: 70 * s, reserved: 60 * s, n: 20, remaining: 0, next: 50 * s, capped: true}, // 10 at 60s
			{op: 'c', t: 80 * s, reserved: 60 * s, n: -3, remaining: 0, next: 40 * s},               // 7
			{op: 'a', t: 130 * s, n: 1, allowed: true, remaining: 4, next: 60 * s},
			{op: 'c', t: 130 * s, reserved: 60 * s, n: -1, remaining: 4, next: 60 * s}, // 60s left the window
			{op: 'a', t: 140 * s, n: 2, allowed: true, remaining: 2, next: 50 * s},
			// At the reservation instant, before the newer entries: 130s×3, 140s×2.
			{op: 'c', t: 150 * s, reserved: 130 * s, n: 2, remaining: 0, next: 40 * s},
			// The oldest at or after 130s: 130s×1, 140s×2 left.
			{op: 'c', t: 150 * s, reserved: 130 * s, n: -2, remaining: 2, next: 40 * s},
			{op: 'a', t: 185 * s, n: 3, retry: 5 * s, remaining: 2, next: 5 * s},
			// The reservation instant left the window: at now.
			{op: 'c', t: 195 * s, reserved: 130 * s, n: 3, remaining: 0, next: 5 * s},
		})
	})
}

// chargeModelTraces drives random interleavings of decisions and charges
// (reservations made at earlier instants, charges and refunds of every
// size, the debt bound included) through the store and the models, and
// requires every Decision to be identical.
func chargeModelTraces(t *testing.T, newStore NewStore, o Options) {
	res := int64(max(o.Resolution, 1))
	const (
		events = 1500
		keys   = 3
	)
	seeds := 8
	if o.Seeds > 0 {
		seeds = o.Seeds
	}
	periods := []time.Duration{time.Second, time.Minute, 7 * time.Second, 250 * time.Millisecond, 3 * time.Second}
	for _, alg := range limiter.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			draw := modelOf(t, alg).draw
			if draw == nil {
				t.Skip("no model: its queue is tested by RunLeakyQueue and RunLeakyVirtual")
			}
			if o.Parallel {
				t.Parallel()
			}
			store := newStore(t)
			ctx := context.Background()
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, 17+uint64(alg)))
				capacity := 1 + rng.Int64N(20)
				cost := int64(1)
				if rng.IntN(3) == 0 {
					cost = 1 + rng.Int64N(min(capacity, 3))
				}
				period := periods[rng.IntN(len(periods))]
				lim, newModel, grid, window, err := draw(rng, capacity, cost, period)
				if err != nil {
					t.Fatal(err)
				}
				l := mustNew(t, store, fmt.Sprintf("charge-model-%d", seed), lim)
				models := map[string]chargeModel{}
				admitted := map[string][]int64{} // instants of each key's admissions
				now := base + rng.Int64N(int64(time.Hour))
				now -= now % res
				for i := range events {
					now += gap(rng, now, grid)
					now -= now % res
					key := "client-" + strconv.Itoa(rng.IntN(keys))
					m := models[key]
					if m == nil {
						m = newModel()
						models[key] = m
					}
					if rng.IntN(2) == 0 {
						n := int64(1)
						if rng.IntN(8) == 0 && 2*cost <= capacity {
							n = 2
						}
						want := m.allow(now, n*cost)
						want.retry = time.Duration(ceilTo(int64(want.retry), res))
						want.next = time.Duration(ceilTo(int64(want.next), res))
						d, err := l.Allow(ctx, key, time.Unix(0, now), n)
						if err != nil {
							t.Fatalf("seed %d step %d: %v", seed, i, err)
						}
						if got := (result{d.Allowed, d.RetryAfter, d.Remaining, next(d, now)}); got != want {
							t.Fatalf("seed %d (%v) step %d: Allow(%s, t=%d, %d) = %+v, want %+v", seed, lim, i, key, now-base, n, got, want)
						}
						if d.Allowed {
							admitted[key] = append(admitted[key], now)
						}
						continue
					}
					// A charge: for one of the key's admissions (often
					// the latest), or an instant up to two windows back.
					reserved := now
					switch a := admitted[key]; {
					case len(a) > 0 && rng.IntN(4) != 0:
						reserved = a[max(0, len(a)-1-rng.IntN(3))]
					case rng.IntN(2) == 0:
						reserved = now - rng.Int64N(2*window+1)
						reserved -= ((reserved % res) + res) % res
					}
					units := rng.Int64N(2*capacity+3) - capacity - 1 // refunds and charges
					if rng.IntN(10) == 0 {
						units = (rng.Int64N(2)*2 - 1) * (2*capacity + rng.Int64N(3)) // the debt bound
					}
					want, wantCapped := m.charge(now, reserved, units)
					want.next = time.Duration(ceilTo(int64(want.next), res))
					d, err := l.Charge(ctx, key, time.Unix(0, now), time.Unix(0, reserved), units)
					if err != nil {
						t.Fatalf("seed %d step %d: %v", seed, i, err)
					}
					if got := (result{d.Allowed, d.RetryAfter, d.Remaining, d.Next}); got != want || d.Capped != wantCapped {
						t.Fatalf("seed %d (%v) step %d: Charge(%s, t=%d, reserved t=%d, %d) = %+v capped %v, want %+v capped %v",
							seed, lim, i, key, now-base, reserved-base, units, got, d.Capped, want, wantCapped)
					}
				}
			}
		})
	}
}

// chargeLimits returns one limit of each algorithm that can be charged,
// with room for the sums chargeConcurrent adds up (capacity ≥ 100000).
func chargeLimits(t *testing.T) []limiter.Limit {
	m := must(t)
	return []limiter.Limit{
		m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 1_000_000})),
		m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1_000_000, Window: time.Hour})),
		m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1_000_000, Window: time.Hour, Slots: 4})),
		m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: limiter.MaxSlidingLogLimit, Window: time.Hour})),
	}
}

// chargeConcurrent: many goroutines charge and refund one key at one
// instant; what remains is the capacity less the sum of their units,
// exactly: no unit lost, none counted twice. Then the same past the debt
// bound: the units applied are the bound, exactly.
func chargeConcurrent(t *testing.T, newStore NewStore) {
	const workers, each = 8, 60
	now := time.Unix(0, base)
	ctx := context.Background()
	for _, lim := range chargeLimits(t) {
		store := newStore(t)
		l := mustNew(t, store, "charge-concurrent", lim)
		var mu sync.Mutex
		var sum int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				var mine int64
				for i := range each {
					// Each worker's own total never goes below zero, so
					// no refund reaches the floor (or the burst).
					u := 1 + rng.Int64N(40)
					if i%3 == 2 {
						u = -rng.Int64N(min(mine, 30) + 1)
					}
					d, err := l.Charge(ctx, "hot", now, now, u)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed || d.Capped {
						t.Errorf("%v: Charge(%d) = %+v", lim, u, d)
					}
					mine += u
				}
				mu.Lock()
				sum += mine
				mu.Unlock()
			})
		}
		wg.Wait()
		q, _ := lim.Quota()
		d, err := l.Charge(ctx, "hot", now, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != q-sum {
			t.Errorf("%v: %d goroutines charged %d units in all; %d remain, want %d − %d = %d", lim, workers, sum, d.Remaining, q, sum, q-sum)
		}
	}
	// Past the bound: 8 × 60 charges of 100 on a limit of 1000 apply
	// exactly 2000, the bound.
	m := must(t)
	for _, lim := range []limiter.Limit{
		m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 1000})),
		m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1000, Window: time.Hour})),
		m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1000, Window: time.Hour, Slots: 4})),
		m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 1000, Window: time.Hour})),
	} {
		l := mustNew(t, newStore(t), "charge-bound", lim)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					if _, err := l.Charge(ctx, "hot", now, now, 100); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		// 2000 applied: refunding 1000 leaves the quota used up, one
		// more frees one.
		if d, err := l.Charge(ctx, "hot", now, now, -1000); err != nil || d.Remaining != 0 {
			t.Fatalf("%v: 48000 charged, 1000 refunded: %+v, %v; want none remaining (2000 applied)", lim, d, err)
		}
		if d, err := l.Charge(ctx, "hot", now, now, -1); err != nil || d.Remaining != 1 {
			t.Fatalf("%v: 48000 charged, 1001 refunded: %+v, %v; want 1 remaining (2000 applied)", lim, d, err)
		}
	}
}

// chargeReconcile: for random costs c and estimates e, Allow(e) then
// Charge(c − e) for a reservation at the same instant leaves each limit
// exactly as Allow(c) would have, when every request is admitted; and,
// for a reconcile later than the reservation but within what the
// reservation still counts, as if Allow(c) had been made at the
// reservation. The states are compared through Peek at many instants
// after the trace: every figure must match.
func chargeReconcile(t *testing.T, newStore NewStore) {
	m := must(t)
	const s = time.Second
	for _, c := range []struct {
		lim  limiter.Limit
		late time.Duration // how late a reconcile may be while exact
		gap  time.Duration // the longest gap between requests
	}{
		// A bucket that is never full again after its first request
		// (1000 of 1000 at 1/h), so a late reconcile is exact too.
		{m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 1000})), 10 * s, 20 * s},
		{m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 50, Per: s}, Burst: 1000})), 0, 3 * s},
		{m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1000, Window: time.Minute})), 0, 10 * s},
		{m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1000, Window: time.Minute, Slots: 6})), 30 * s, 10 * s},
		{m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1000, Window: time.Minute, Slots: 1})), 30 * s, 10 * s},
		{m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 1000, Window: time.Minute})), 30 * s, 10 * s},
	} {
		for _, late := range []bool{false, true} {
			if late && c.late == 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v/late=%v", c.lim, late), func(t *testing.T) {
				store := newStore(t)
				l := mustNew(t, store, "reconcile", c.lim)
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(uint64(c.gap), uint64(c.late)))
				now := base
				for i := range 40 {
					now += rng.Int64N(int64(c.gap)) / 1000 * 1000
					cost, est := 1+rng.Int64N(20), 1+rng.Int64N(20)
					at := time.Unix(0, now)
					direct, err := l.Allow(ctx, "direct", at, cost)
					if err != nil || !direct.Allowed {
						t.Fatalf("request %d: Allow(%d) = %+v, %v: the test needs every request admitted", i, cost, direct, err)
					}
					if d, err := l.Allow(ctx, "reserve", at, est); err != nil || !d.Allowed {
						t.Fatalf("request %d: reserving %d: %+v, %v", i, est, d, err)
					}
					then := at
					if late {
						then = at.Add(time.Duration(rng.Int64N(int64(c.late))) / 1000 * 1000)
					}
					d, err := l.Charge(ctx, "reserve", then, at, cost-est)
					if err != nil || !d.Allowed || d.Capped {
						t.Fatalf("request %d: Charge(%d) = %+v, %v", i, cost-est, d, err)
					}
					if !late {
						// The same figures at once, too.
						if d.Remaining != direct.Remaining || !d.ResetAt.Equal(direct.ResetAt) || d.Next != direct.Next {
							t.Fatalf("request %d: reconciled %+v, decided %+v", i, d, direct)
						}
					}
					if late {
						// The next request is after the reconcile.
						now = max(now, then.UnixNano())
					}
				}
				for k := range 60 {
					at := time.Unix(0, now+int64(k)*int64(c.gap)/3)
					for _, n := range []int64{1, 7, 300} {
						a, err1 := l.PeekN(ctx, "reserve", at, n)
						b, err2 := l.PeekN(ctx, "direct", at, n)
						if err1 != nil || err2 != nil {
							t.Fatal(err1, err2)
						}
						if !sameDecision(a, b) {
							t.Fatalf("Peek(t+%v, %d): reserved and reconciled %+v, decided at once %+v", at.Sub(time.Unix(0, base)), n, a, b)
						}
					}
				}
			})
		}
	}
}

// sameDecision compares every figure of two Decisions, instants with Equal.
func sameDecision(a, b limiter.Decision) bool {
	eq := a.ResetAt.Equal(b.ResetAt)
	a.ResetAt, b.ResetAt = time.Time{}, time.Time{}
	return eq && a == b
}

// chargeKeys: several limits charged at once, keys per limit and
// SkipKey, a leaky bucket refused (and nothing charged), n = 0.
func chargeKeys(t *testing.T, newStore NewStore, o Options) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	now := time.Unix(0, base)
	tb := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 10}))
	fw := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 20, Window: time.Hour}))
	lb := m(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Queue: 5, MaxWait: time.Minute}))
	l := mustNew(t, store, "charge-keys", tb, fw)
	d, err := l.Charge(ctx, "k", now, now, 15)
	if err != nil || !d.Allowed || d.RetryAfter != 0 || d.Index != 0 || d.Remaining != 0 || d.Capped {
		t.Fatalf("Charge(15) on burst 10 and limit 20: %+v, %v; want allowed, the bucket (index 0) with 0 remaining", d, err)
	}
	if d, _ := l.Allow(ctx, "k", now, 1); d.Allowed || d.Index != 0 || d.RetryAfter != 6*time.Hour {
		t.Fatalf("after the charge: %+v, want rejected by the bucket, 6h (−5 tokens at 1/h)", d)
	}
	// The window took 15 too: 5 left.
	if d, err := l.Charge(ctx, "k", now, now, 0); err != nil || d.Remaining != 0 || d.Capped {
		t.Fatalf("Charge(0): %+v, %v", d, err)
	}
	if d, _ := mustNew(t, store, "charge-keys", fw).Peek(ctx, "k", now); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("the window after the charge: %+v, want 5 left (4 after the peeked request)", d)
	}
	// Capped is any limit's: 10 more takes the bucket to −10 (capped at
	// −10 from −5) and the window to 25 of 40.
	if d, _ := l.Charge(ctx, "k", now, now, 10); !d.Capped {
		t.Fatalf("Charge(10) past the bucket's bound: %+v, want capped", d)
	}

	// A refund to a fresh key leaves it fresh.
	if d, err := l.Charge(ctx, "fresh", now, now, -5); err != nil || d.Remaining != 10 || !d.ResetAt.Equal(now) || d.Next != 0 {
		t.Fatalf("refund to a fresh key: %+v, %v", d, err)
	}
	if d, _ := l.Allow(ctx, "fresh", now, 10); !d.Allowed {
		t.Fatalf("a fresh key refunded: %+v, want its full burst", d)
	}
	if o.OneKey {
		return
	}

	// Keys per limit.
	if _, err := l.ChargeKeys(ctx, []string{"a", "b"}, now, now, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		keys []string
		want int64
	}{{[]string{"a", "x"}, 7}, {[]string{"x", "b"}, 10}} {
		d, err := l.ChargeKeys(ctx, c.keys, now, now, 0)
		if err != nil || d.Index != 0 || d.Remaining != c.want {
			t.Fatalf("ChargeKeys(%q, 0) = %+v, %v: want the bucket with %d", c.keys, d, err, c.want)
		}
	}
	if _, err := l.ChargeKeys(ctx, []string{"a"}, now, now, 1); err == nil {
		t.Fatal("one key for two limits was accepted")
	}

	// A leaky bucket cannot be charged; skipped, the others are.
	withLeaky := mustNew(t, store, "charge-leaky", lb, tb)
	_, err = withLeaky.Charge(ctx, "k", now, now, 5)
	var pe *limiter.ParamError
	if !errors.As(err, &pe) || pe.Algorithm != limiter.LeakyBucket {
		t.Fatalf("charging a leaky bucket: %v, want a *limiter.ParamError for it", err)
	}
	if d, _ := withLeaky.ChargeKeys(ctx, []string{limiter.SkipKey, "k"}, now, now, 0); d.Remaining != 10 {
		t.Fatalf("the failed charge charged the bucket: %+v", d)
	}
	d, err = withLeaky.ChargeKeys(ctx, []string{limiter.SkipKey, "k"}, now, now, 4)
	if err != nil || d.Index != 1 || d.Remaining != 6 {
		t.Fatalf("ChargeKeys with the leaky bucket skipped: %+v, %v; want index 1 with 6 left", d, err)
	}
	if d, err := withLeaky.ChargeKeys(ctx, []string{limiter.SkipKey, limiter.SkipKey}, now, now, 4); err != nil || !d.Allowed || d.Index != -1 {
		t.Fatalf("ChargeKeys with every limit skipped: %+v, %v", d, err)
	}
	tbd, lbd := tb.Driver(), lb.Driver()
	if err := tbd.CheckCharge(); err != nil {
		t.Errorf("CheckCharge(token bucket) = %v", err)
	}
	if err := lbd.CheckCharge(); err == nil {
		t.Error("CheckCharge(leaky bucket) = nil")
	}
}

// chargeBounds: the largest limits charged the largest n, either sign:
// capped at the bound, no overflow, and refunded back to fresh.
func chargeBounds(t *testing.T, newStore NewStore, o Options) {
	res := int64(max(o.Resolution, 1))
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	now := time.Unix(0, base)
	for _, c := range []struct {
		lim   limiter.Limit
		retry time.Duration // of Allow(1) in the deepest debt
	}{
		// 10⁹ + 1 tokens at 10⁹/s.
		{m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: limiter.MaxCount, Per: time.Second}, Burst: limiter.MaxCount})), time.Second + 1},
		{m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 100})), 101 * time.Hour},
		{m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limiter.MaxCount, Window: time.Hour})), time.Hour},
		// A fixed window's largest limit, 2³²: a debt of 2³³ units.
		{m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limiter.MaxWindowLimit, Window: time.Hour})), time.Hour},
		// 2·10⁹ in one slot: one unit fits once it weighs 10⁹ − 1, a
		// little after half the slot past the window.
		{m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: limiter.MaxCount, Window: 8 * time.Second, Slots: 1})), 12*time.Second + 4},
		{m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: limiter.MaxCount, Window: 8 * time.Second, Slots: 4})), 9*time.Second + 1},
		{m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: limiter.MaxSlidingLogLimit, Window: time.Hour})), time.Hour},
	} {
		l := mustNew(t, store, "charge-bounds", c.lim)
		q, _ := c.lim.Quota()
		for _, n := range []int64{math.MaxInt64, 3 * q, math.MaxInt64} {
			d, err := l.Charge(ctx, "k", now, now, n)
			if err != nil || !d.Capped || d.Remaining != 0 || !d.Allowed {
				t.Fatalf("%v: Charge(%d) = %+v, %v; want capped, none remaining", c.lim, n, d, err)
			}
		}
		d, err := l.Allow(ctx, "k", now, 1)
		if retry := time.Duration(ceilTo(int64(c.retry), res)); err != nil || d.Allowed || d.RetryAfter != retry {
			t.Fatalf("%v: Allow(1) at the bound = %+v, %v; want Retry-After %v", c.lim, d, err, retry)
		}
		// q back: the quota used up; one more frees one.
		if d, err := l.Charge(ctx, "k", now, now, -q); err != nil || d.Remaining != 0 {
			t.Fatalf("%v: refund of q: %+v, %v; want none remaining", c.lim, d, err)
		}
		if d, err := l.Charge(ctx, "k", now, now, -1); err != nil || d.Remaining != 1 {
			t.Fatalf("%v: refund of q+1: %+v, %v; want 1 remaining", c.lim, d, err)
		}
		if d, err := l.Charge(ctx, "k", now, now, math.MinInt64); err != nil || d.Remaining != q || d.Capped {
			t.Fatalf("%v: Charge(MinInt64) = %+v, %v; want a fresh limit", c.lim, d, err)
		}
	}
}

// windowLimitBounds: a fixed window of the largest limit,
// limiter.MaxWindowLimit (2³²), and of the largest cost: the whole limit
// in one request and in requests of 10⁹, nothing past it, the count
// exact to the unit (the Redis script's arithmetic is on doubles), and a
// fresh window after.
func windowLimitBounds(t *testing.T, newStore NewStore) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	now := time.Unix(0, base).Truncate(time.Hour)
	const max = limiter.MaxWindowLimit
	l := mustNew(t, store, "window-bounds", m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: max, Window: time.Hour})))
	for i := range 4 {
		if d, err := l.Allow(ctx, "k", now, 1e9); err != nil || !d.Allowed || d.Remaining != max-int64(i+1)*1e9 || d.Limit != max {
			t.Fatalf("Allow(10⁹) #%d: %+v, %v", i+1, d, err)
		}
	}
	if d, err := l.Allow(ctx, "k", now, 1e9); err != nil || d.Allowed || d.Remaining != max-4e9 {
		t.Fatalf("Allow(10⁹) past the limit: %+v, %v", d, err)
	}
	if d, err := l.Allow(ctx, "k", now, max-4e9); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Allow(the rest, %d): %+v, %v", int64(max-4e9), d, err)
	}
	if d, err := l.Allow(ctx, "k", now, 1); err != nil || d.Allowed {
		t.Fatalf("Allow(1) at the limit: %+v, %v", d, err)
	}
	if d, err := l.Allow(ctx, "k", now.Add(time.Hour), max); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Allow(2³²) in the next window: %+v, %v", d, err)
	}
	if d, err := l.Allow(ctx, "k", now.Add(2*time.Hour), max+1); err != nil || d.Allowed || d.RetryAfter != limiter.Never {
		t.Fatalf("Allow(2³²+1): %+v, %v; want never", d, err)
	}
	big := mustNew(t, store, "window-bounds-cost", m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: max, Window: time.Hour, Cost: max})))
	if d, err := big.Allow(ctx, "k", now, 1); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost 2³²: %+v, %v", d, err)
	}
	if _, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: max + 1, Window: time.Hour}); err == nil {
		t.Error("a fixed window's limit of 2³²+1 accepted")
	}
}
