package leases_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// driverLimit returns l bound into a Limiter over tier, as the tier sees
// it.
func driverLimit(t *testing.T, tier *leases.Store, l limiter.Limit) driver.Limit {
	t.Helper()
	return newLimiter(t, tier, l).Limits()[0].Driver()
}

// TestOptionsTakenAsGiven: an option's smallest value is taken as given,
// not as its default; a MaxShare above 1 (or not above 0) is the
// default's.
func TestOptionsTakenAsGiven(t *testing.T) {
	ctx := context.Background()
	t.Run("LeaseTime", func(t *testing.T) {
		tier := leases.New(newRecording(0), leases.Options{LeaseTime: time.Nanosecond})
		d := driverLimit(t, tier, bucket(t, 10, time.Second, 10_000))
		now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		if g, err := tier.Lease(ctx, &d, "k", now, 10); err != nil || !g.Expires.Equal(now.Add(time.Nanosecond)) {
			t.Errorf("Lease: %+v %v, want one lasting a nanosecond", g, err)
		}
	})
	t.Run("MaxShare", func(t *testing.T) {
		for _, c := range []struct{ give, want float64 }{
			{1, 1}, {0.5, 0.5}, {1.5, leases.DefaultMaxShare}, {0, leases.DefaultMaxShare},
			{-1, leases.DefaultMaxShare}, {math.NaN(), leases.DefaultMaxShare},
		} {
			if got := leases.New(newRecording(0), leases.Options{MaxShare: c.give}).MaxShare(); got != c.want {
				t.Errorf("MaxShare %v: %v, want %v", c.give, got, c.want)
			}
		}
	})
	t.Run("MinLease", func(t *testing.T) {
		// A quota of 100 at 1%: leases of one request, leased from
		// MinLease 1 on, never at the default's 8.
		sl := sliding(t, 100, time.Minute)
		for _, c := range []struct {
			min  int64
			want float64
		}{{1, 2 * 1.5 * 1 / 100.0}, {0, 0}} {
			tier := leases.New(newRecording(0), leases.Options{MinLease: c.min})
			d := driverLimit(t, tier, sl)
			if got := tier.Bound(&d, 2); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("MinLease %d: Bound %v, want %v", c.min, got, c.want)
			}
		}
	})
	t.Run("RenewTimeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			hung := &hanging{Store: memstore.New(memstore.Options{})}
			tier := leases.New(hung, leases.Options{RenewTimeout: time.Nanosecond, MinLease: 2})
			lim := newLimiter(t, tier, fixed(t, 100_000, time.Hour))
			hung.hang.Store(true)
			allowN(lim, "k", 2) // hot at the 2nd: its renewal hangs
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if st := tier.Stats(); st.LeaseErrors != 1 {
				t.Errorf("a nanosecond after the renewal: %+v, want it given up", st)
			}
		})
	})
}

// TestMaxKeysBoundsLeases: MaxKeys 1 is taken as given (one key a shard
// of the 64): of 100 keys made hot, no more than 64 hold a lease, and
// each other key is decided by the shared store, exactly.
func TestMaxKeysBoundsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, tier, lim := tiered(t, leases.Options{MaxKeys: 1, MinLease: 2, MaxShare: 0.5, LeaseTime: time.Hour}, fixed(t, 1000, time.Hour))
		for i := range 100 {
			allowN(lim, fmt.Sprint("k", i), 3)
		}
		h := tier.Holding(time.Now())
		if h.Keys == 0 || h.Keys > 64 {
			t.Errorf("%d keys hold a lease, want 1 to 64", h.Keys)
		}
		leased := 0
		for i := range 100 {
			k := fmt.Sprint("k", i)
			if shared.leased[k] > 0 {
				leased++
			} else if shared.exact[k] != 3 {
				t.Errorf("key %s, never leased: %d exact decisions, want 3", k, shared.exact[k])
			}
		}
		if leased != h.Keys {
			t.Errorf("%d keys were leased, %d hold a lease", leased, h.Keys)
		}
	})
}

// generous is a shared store that admits everything, with a limit's
// figures: what a lease of the whole quota gets.
type generous struct{ driver.Store }

func (generous) Decide(_ context.Context, limits []driver.Limit, _ driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	q, _ := limits[0].Quota()
	return driver.Decision{Allowed: true, Limit: q, ResetAt: now}, nil
}

// TestHoldingCountsEveryUnit: Holding counts a lease down to its last
// unit, a used-up one not at all, and the share of a quota of 1.
func TestHoldingCountsEveryUnit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, tier, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.1, MinLease: 4}, fixed(t, 1000, time.Hour))
		allowN(lim, "k", 4) // a lease of 4
		shared.mu.Lock()
		shared.failLeases = true // no more
		shared.mu.Unlock()
		allowN(lim, "k", 3)
		if h, want := tier.Holding(time.Now()), (leases.Holding{Units: 1, Keys: 1, MaxRatio: 1.0 / 1000}); h != want {
			t.Errorf("one unit left: %+v, want %+v", h, want)
		}
		allowN(lim, "k", 1)
		if h := tier.Holding(time.Now()); h != (leases.Holding{}) {
			t.Errorf("the lease used up: %+v, want nothing", h)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		tier := leases.New(generous{memstore.New(memstore.Options{})}, leases.Options{LeaseTime: time.Hour, MaxShare: 1, MinLease: 1})
		allowN(newLimiter(t, tier, bucket(t, 1, time.Second, 1)), "k", 1)
		if h, want := tier.Holding(time.Now()), (leases.Holding{Units: 1, Keys: 1, MaxRatio: 1}); h != want {
			t.Errorf("the whole quota of 1 leased: %+v, want %+v", h, want)
		}
	})
}

// TestStatsCountBoundedLimits: Stats count the decisions of Bounded
// limits: an Exact limit decided with them is not counted.
func TestStatsCountBoundedLimits(t *testing.T) {
	tier := leases.New(newRecording(0), leases.Options{MinLease: 1000})
	lim := bind(t, tier, fixed(t, 1000, time.Hour).WithAccuracy(limiter.Bounded), fixed(t, 1, time.Hour))
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		lim.Allow(context.Background(), "k", now, 1)
	}
	if st := tier.Stats(); st != (leases.Stats{Shared: 3}) {
		t.Errorf("Stats %+v, want 3 shared decisions", st)
	}
}

// TestLeaseTakesWhatIsLeft: a lease a window's limit refuses is asked
// again for what the shared store said is left, in requests of the
// limit's cost; a token bucket's is not.
func TestLeaseTakesWhatIsLeft(t *testing.T) {
	fw := must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 20, Window: time.Hour, Cost: 2}))
	sl := must(t)(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 20, Window: time.Hour, Cost: 2}))
	tb := must(t)(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 20, Cost: 2}))
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		l    limiter.Limit
		left int64 // requests of cost 2 left
		want int64
	}{
		{"fixed window", fw, 3, 3},
		{"sliding log", sl, 3, 3},
		{"one left", fw, 1, 1},
		{"token bucket", tb, 3, 0},
	} {
		shared := newRecording(0)
		tier := leases.New(shared, leases.Options{})
		d := driverLimit(t, tier, c.l)
		if used, err := shared.Store.Decide(context.Background(), []driver.Limit{d}, driver.OneKey("k"), now, 10-c.left); err != nil || !used.Allowed {
			t.Fatal(used, err)
		}
		g, err := tier.Lease(context.Background(), &d, "k", now, 5)
		if err != nil || g.Units != c.want {
			t.Errorf("%s, %d left: %+v %v, want %d", c.name, c.left, g, err, c.want)
		}
	}
}

// TestLeaseExpiry: a lease lasts LeaseTime from the instant it is taken;
// a fixed window's ends with its window if that is sooner, and only a
// fixed window's.
func TestLeaseExpiry(t *testing.T) {
	tier := leases.New(newRecording(0), leases.Options{LeaseTime: time.Second})
	fw, tb := fixed(t, 1000, time.Minute), bucket(t, 1000, time.Second, 1000)
	end := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		l    limiter.Limit
		at   time.Time
		want time.Time
	}{
		{"fixed window, far from its end", fw, end.Add(-time.Minute / 2), end.Add(-time.Minute/2 + time.Second)},
		{"fixed window, near its end", fw, end.Add(-time.Second / 4), end},
		{"token bucket, full again sooner", tb, end, end.Add(time.Second)},
	} {
		d := driverLimit(t, tier, c.l)
		g, err := tier.Lease(context.Background(), &d, c.name, c.at, 10)
		if err != nil || g.Units != 10 || !g.Expires.Equal(c.want) {
			t.Errorf("%s: %+v %v, want 10 units until %v", c.name, g, err, c.want)
		}
	}
}

// degrading is a shared store that decides without its shared state,
// as the Redis store's on_error does.
type degrading struct{ driver.Store }

func (s degrading) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	d, err := s.Store.Decide(ctx, limits, keys, now, n)
	d.Degraded = true
	return d, err
}

// TestNoLeaseFromDegradedDecision: a degraded decision is not a lease:
// Lease returns ErrStoreUnavailable, and a hot key holds nothing.
func TestNoLeaseFromDegradedDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tier := leases.New(degrading{memstore.New(memstore.Options{})}, leases.Options{LeaseTime: time.Hour, MinLease: 2, MaxShare: 0.1})
		lim := newLimiter(t, tier, fixed(t, 1000, time.Hour))
		d := lim.Limits()[0].Driver()
		if g, err := tier.Lease(context.Background(), &d, "k", time.Now(), 10); !errors.Is(err, driver.ErrStoreUnavailable) || g.Units != 0 {
			t.Errorf("Lease: %+v %v, want ErrStoreUnavailable", g, err)
		}
		allowN(lim, "k", 10)
		if h, st := tier.Holding(time.Now()), tier.Stats(); h != (leases.Holding{}) || st.LeasesGranted != 0 || st.LeaseErrors != st.LeaseCalls {
			t.Errorf("after 10 degraded decisions: %+v, %+v; want no lease, every lease call an error", h, st)
		}
	})
}

// TestRenewalAtHalf: a lease is renewed when less than half of it is
// left: with exactly half left, not yet.
func TestRenewalAtHalf(t *testing.T) {
	for _, size := range []int64{2, 4} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shared, tier, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.1, MinLease: size}, fixed(t, 1000, time.Hour))
				allowN(lim, "k", int(size)) // hot: a lease of MinLease
				allowN(lim, "k", int(size/2))
				if shared.leased["k"] != 1 || tier.Holding(time.Now()).Units != size/2 {
					t.Fatalf("half of the lease left: %d leases, %+v; want no renewal yet", shared.leased["k"], tier.Holding(time.Now()))
				}
				allowN(lim, "k", 1)
				if shared.leased["k"] != 2 {
					t.Errorf("less than half left: %d leases, want the renewal", shared.leased["k"])
				}
			})
		})
	}
}

// TestFailedRenewalWaitsLeaseTime: a renewal the shared store fails is
// not asked again for a lease time, however hot the key.
func TestFailedRenewalWaitsLeaseTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, _, lim := tiered(t, leases.Options{LeaseTime: time.Second, MaxShare: 0.1, MinLease: 2}, fixed(t, 1000, time.Hour))
		shared.failLeases = true
		allowN(lim, "k", 20)
		if shared.leased["k"] != 1 {
			t.Errorf("%d lease calls, want the one that failed", shared.leased["k"])
		}
		time.Sleep(time.Second - time.Nanosecond)
		allowN(lim, "k", 1)
		if shared.leased["k"] != 1 {
			t.Errorf("before a lease time: %d lease calls, want 1", shared.leased["k"])
		}
		time.Sleep(time.Nanosecond)
		allowN(lim, "k", 1)
		if shared.leased["k"] != 2 {
			t.Errorf("a lease time after: %d lease calls, want 2", shared.leased["k"])
		}
	})
}

// TestEndedLeaseNotUsed: the units of a lease that has ended are not
// used: past its end, with the shared store down, a request gets its
// error.
func TestEndedLeaseNotUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, tier, lim := tiered(t, leases.Options{LeaseTime: time.Second, MaxShare: 0.1, MinLease: 4}, sliding(t, 1000, time.Hour))
		allowN(lim, "k", 4)
		if tier.Holding(time.Now()).Units != 4 {
			t.Fatalf("%+v, want a lease of 4", tier.Holding(time.Now()))
		}
		shared.mu.Lock()
		shared.fail = true
		shared.mu.Unlock()
		time.Sleep(time.Second - time.Nanosecond)
		if d, err := lim.Allow(context.Background(), "k", time.Now(), 1); err != nil || !d.Allowed {
			t.Errorf("before the lease's end: %+v %v, want admitted from it", d, err)
		}
		time.Sleep(time.Nanosecond)
		if d, err := lim.Allow(context.Background(), "k", time.Now(), 1); !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Errorf("at the lease's end: %+v %v, want the shared store's error", d, err)
		}
	})
}

// scripted is a recording shared store whose calls a test can answer
// itself (answer: ok) or precede with what other instances take
// (before), and whose leases can take a while (calls of a weight over 2:
// these tests' leases, not their requests).
type scripted struct {
	*recording
	smu          sync.Mutex
	answer       func(now time.Time, n int64) (driver.Decision, bool)
	before       func(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64)
	leaseLatency time.Duration
}

func newScripted() *scripted { return &scripted{recording: newRecording(0)} }

func (s *scripted) set(f func(*scripted)) {
	s.smu.Lock()
	defer s.smu.Unlock()
	f(s)
}

func (s *scripted) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	s.smu.Lock()
	answer, before, lat := s.answer, s.before, s.leaseLatency
	s.smu.Unlock()
	if n > 2 {
		time.Sleep(lat)
	}
	if before != nil {
		before(ctx, limits, keys, now, n)
	}
	if answer != nil {
		if d, ok := answer(now, n); ok {
			s.mu.Lock()
			if n > 1 {
				s.leased[keys.For(0)]++
			} else {
				s.exact[keys.For(0)]++
			}
			s.mu.Unlock()
			return d, nil
		}
	}
	return s.recording.Decide(ctx, limits, keys, now, n)
}

// take has other instances take from key of l in s's shared state at
// now until left units are left of it. (It may run on a renewal's
// goroutine: it reports with Errorf.)
func (s *scripted) take(t *testing.T, l *driver.Limit, key string, now time.Time, left int64) {
	t.Helper()
	ls := []driver.Limit{*l}
	p, err := s.Store.Peek(context.Background(), ls, driver.OneKey(key), now, 1)
	if err != nil {
		t.Errorf("Peek: %v", err)
		return
	}
	// Peek's Remaining is after a request of 1.
	if n := p.Remaining + 1 - left; n > 0 {
		if d, err := s.Store.Decide(context.Background(), ls, driver.OneKey(key), now, n); err != nil || !d.Allowed {
			t.Errorf("others taking %d: %+v %v", n, d, err)
		}
	}
}

// TestRefusedLocallyIndex: a request refused here by some of its limits
// carries the figures and the index of the one that resets last (the
// first such, in order), wherever it stands.
func TestRefusedLocallyIndex(t *testing.T) {
	for _, order := range [][3]string{{"big", "a", "b"}, {"b", "a", "big"}, {"big", "b", "a"}, {"b", "big", "a"}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shared := newRecording(0)
				tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
				big, a, b := refusingLimits(t)
				byName := map[string]limiter.Limit{"big": big, "a": a, "b": b}
				var ls []limiter.Limit
				want := -1
				for i, n := range order {
					ls = append(ls, byName[n].WithAccuracy(limiter.Bounded))
					if n == "b" {
						want = i
					}
				}
				lim := bind(t, tier, ls...)
				allowN(lim, "k", 5) // a and b spent: the 5th is refused
				calls := shared.calls("k")
				d, err := lim.Allow(context.Background(), "k", time.Now(), 1)
				synctest.Wait()
				if err != nil || d.Allowed || d.Index != int32(want) || d.Limit != 4 || d.RetryAfter != 2*time.Minute {
					t.Errorf("over a and b: %+v %v, want refused with b's figures (index %d)", d, err, want)
				}
				if c := shared.calls("k"); c != calls {
					t.Errorf("the shared store was asked %d times more", c-calls)
				}
			})
		})
	}
}

// TestAdmittedFromLeaseIndex: a request admitted by the shared store for
// two limits and from a lease for the one between them carries the
// figures and index of the most restrictive, the leased one.
func TestAdmittedFromLeaseIndex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tier := leases.New(newRecording(0), leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		x, a, y := fixed(t, 1000, time.Hour), fixed(t, 100, time.Hour), fixed(t, 500, time.Hour)
		lim := bind(t, tier, x, a.WithAccuracy(limiter.Bounded), y)
		allowN(lim, "k", 2) // a is hot: a lease of 2
		d, err := lim.Allow(context.Background(), "k", time.Now(), 1)
		if err != nil || !d.Allowed || d.Index != 1 || d.Limit != 100 || d.Remaining != 100-4+1 {
			t.Errorf("from a's lease: %+v %v, want admitted with a's figures (index 1, 97 remaining)", d, err)
		}
		if st := tier.Stats(); st.Local != 1 {
			t.Errorf("%+v: want one decision from the lease", st)
		}
	})
}

// TestRefusedRequestsAreNoRate: requests another limit refuses do not
// count towards a key's rate: it is not leased from them.
func TestRefusedRequestsAreNoRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newRecording(0)
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 4})
		lim := bind(t, tier, fixed(t, 1000, time.Hour).WithAccuracy(limiter.Bounded), fixed(t, 2, time.Hour))
		allowN(lim, "k", 12) // 2 admitted, 10 refused by strict
		if shared.leased["k"] != 0 {
			t.Errorf("%d leases of a key admitted twice", shared.leased["k"])
		}
	})
}

// TestGivenBackUnitsAreNoRate: units taken from a lease and given back
// (another limit refused the request) do not count towards the key's
// rate, which sizes its next lease.
func TestGivenBackUnitsAreNoRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &sizing{recording: newRecording(0)}
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		lim := bind(t, tier, fixed(t, 1000, time.Hour).WithAccuracy(limiter.Bounded), fixed(t, 4, time.Minute))
		allowN(lim, "k", 4+20) // 4 admitted (leases of 2 and 2), 20 refused by strict
		time.Sleep(time.Minute)
		allowN(lim, "k", 2) // the lease used up: the next holds half the rate of 6
		if got := shared.sizes(); fmt.Sprint(got) != "[2 2 3]" {
			t.Errorf("lease sizes %v, want [2 2 3]", got)
		}
	})
}

// TestSpentWindowOpensAtItsEnd: a fixed window's key refused here once
// the window was spent (a lease refused with nothing left) is decided by
// the shared store again from the window's end: its first request there
// is admitted.
func TestSpentWindowOpensAtItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, tier, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2}, fixed(t, 10, time.Minute))
		end := time.Now().Add(time.Minute)
		allowN(lim, "k", 10) // the last lease asked for is refused
		if tier.Holding(time.Now()).Units != 0 || tier.Stats().LeasesGranted == tier.Stats().LeaseCalls {
			t.Fatalf("%+v, %+v: want the window spent, a lease refused", tier.Holding(time.Now()), tier.Stats())
		}
		time.Sleep(time.Until(end))
		if d, err := lim.Allow(context.Background(), "k", time.Now(), 1); err != nil || !d.Allowed {
			t.Errorf("at the window's end: %+v %v, want admitted", d, err)
		}
	})
}

// TestLocalRemainingAtMostLimit: a request decided from a lease never
// says more remains than the limit, though a token bucket refilled while
// the last lease was in hand and the next one adds to it.
func TestLocalRemainingAtMostLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2}, bucket(t, 1000, time.Second, 100))
		top := int64(0)
		for i := range 80 {
			if i == 40 {
				time.Sleep(100 * time.Millisecond) // full again
			}
			d, err := lim.Allow(context.Background(), "k", time.Now(), 1)
			synctest.Wait()
			if err != nil || !d.Allowed || d.Remaining > d.Limit {
				t.Fatalf("request %d: %+v %v, want admitted with at most the limit remaining", i, d, err)
			}
			top = max(top, d.Remaining)
		}
		if top != 100 {
			t.Errorf("at most %d remaining, want 100: the test checks nothing", top)
		}
	})
}

// TestRefusedHereFigures: a token bucket's key refused here carries the
// shared store's figures at the refusal the tier remembers: its wait,
// its limit, and when it is full again (later than the wait).
func TestRefusedHereFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, _, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2}, bucket(t, 1, time.Second, 10))
		shared.failLeases = true // decided exactly, refusal remembered
		ctx := context.Background()
		allowN(lim, "k", 10)
		d0, _ := lim.Allow(ctx, "k", time.Now(), 1)
		if d0.Allowed || d0.RetryAfter != time.Second || !d0.ResetAt.Equal(time.Now().Add(10*time.Second)) {
			t.Fatalf("the shared store's refusal: %+v", d0)
		}
		calls := shared.calls("k")
		time.Sleep(time.Second / 4)
		d, _ := lim.Allow(ctx, "k", time.Now(), 1)
		wait := 3 * time.Second / 4
		if want := (limiter.Decision{RetryAfter: wait, Limit: 10, ResetAt: d0.ResetAt, Next: wait}); d != want || shared.calls("k") != calls {
			t.Errorf("refused here:\n got %+v\nwant %+v", d, want)
		}
	})
	// After a lease the shared store refused: its figures then, though
	// others took from the key since the last lease.
	synctest.Test(t, func(t *testing.T) {
		shared := newScripted()
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		lim := newLimiter(t, tier, bucket(t, 1, time.Second, 20))
		l := lim.Limits()[0].Driver()
		ctx := context.Background()
		allowN(lim, "k", 2) // a lease of 2
		shared.take(t, &l, "k", time.Now(), 0)
		allowN(lim, "k", 2) // the lease used: the renewal is refused
		if shared.leased["k"] != 2 || tier.Holding(time.Now()).Units != 0 {
			t.Fatalf("%d leases, %+v: want the second refused", shared.leased["k"], tier.Holding(time.Now()))
		}
		p, _ := shared.Store.Peek(ctx, []driver.Limit{l}, driver.OneKey("k"), time.Now(), 1)
		calls := shared.calls("k")
		d, _ := lim.Allow(ctx, "k", time.Now(), 1)
		if d.Allowed || d.Limit != 20 || !d.ResetAt.Equal(p.ResetAt) || d.RetryAfter <= 0 || shared.calls("k") != calls {
			t.Errorf("refused here: %+v, want the shared store's ResetAt %v", d, p.ResetAt)
		}
	})
}

// TestNewBindingStartsOver: a limit bound anew under the same name (a
// reload that changed it) starts its keys over: a lease or a refusal of
// the old limit that comes back afterwards is not the new one's.
func TestNewBindingStartsOver(t *testing.T) {
	t.Run("lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			shared := newScripted()
			tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 4})
			old := newLimiter(t, tier, fixed(t, 1000, time.Hour))
			shared.set(func(s *scripted) { s.leaseLatency = time.Second })
			allowN(old, "k", 4) // hot: its lease takes a second
			renewed := newLimiter(t, tier, fixed(t, 2000, time.Hour))
			allowN(renewed, "k", 1)
			time.Sleep(time.Second)
			synctest.Wait()
			if shared.leased["k"] != 1 || tier.Holding(time.Now()) != (leases.Holding{}) {
				t.Errorf("%d leases, %+v: want the old limit's lease dropped", shared.leased["k"], tier.Holding(time.Now()))
			}
		})
	})
	t.Run("refusal", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			shared := newScripted()
			tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
			old := newLimiter(t, tier, fixed(t, 2, time.Hour))
			allowN(old, "k", 2) // spent
			release := make(chan struct{})
			shared.set(func(s *scripted) {
				s.before = func(_ context.Context, limits []driver.Limit, _ driver.Keys, _ time.Time, _ int64) {
					if q, _ := limits[0].Quota(); q == 2 {
						<-release
					}
				}
			})
			go old.Allow(context.Background(), "k", time.Now(), 1) // refused, late
			synctest.Wait()
			renewed := newLimiter(t, tier, fixed(t, 1000, time.Hour))
			allowN(renewed, "k", 2) // hot: leased
			close(release)
			synctest.Wait()
			admitN(t, renewed, "k", 20)
		})
	})
}

// TestShortRefusalRemembered: a refusal of the shared store is
// remembered for its wait however short: a nanosecond's refuses the
// requests of that instant here, and not the next nanosecond's.
func TestShortRefusalRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newScripted()
		shared.failLeases = true
		lim := newLimiter(t, leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2}), sliding(t, 1000, time.Hour))
		allowN(lim, "k", 4)
		refuse := true
		shared.set(func(s *scripted) {
			s.answer = func(time.Time, int64) (driver.Decision, bool) {
				return driver.Decision{RetryAfter: time.Nanosecond, Limit: 1000, Next: time.Nanosecond}, refuse
			}
		})
		allowN(lim, "k", 1) // refused by the shared store
		calls := shared.calls("k")
		refuse = false
		if d, _ := lim.Allow(context.Background(), "k", time.Now(), 1); d.Allowed || d.RetryAfter != time.Nanosecond || shared.calls("k") != calls {
			t.Errorf("at the refusal's instant: %+v, %d calls more; want refused here", d, shared.calls("k")-calls)
		}
		time.Sleep(time.Nanosecond)
		if d, _ := lim.Allow(context.Background(), "k", time.Now(), 1); !d.Allowed || shared.calls("k") != calls+1 {
			t.Errorf("a nanosecond later: %+v, %d calls more; want admitted by the shared store", d, shared.calls("k")-calls)
		}
	})
}

// TestNeverRefusedLeaseWaitsLeaseTime: a lease the shared store says
// can never be granted (RetryAfter Never) is not asked for again within
// a lease time.
func TestNeverRefusedLeaseWaitsLeaseTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newScripted()
		shared.answer = func(_ time.Time, n int64) (driver.Decision, bool) {
			return driver.Decision{RetryAfter: driver.Never, Limit: 1000}, n > 1
		}
		lim := newLimiter(t, leases.New(shared, leases.Options{LeaseTime: time.Second, MaxShare: 0.5, MinLease: 2}), sliding(t, 1000, time.Hour))
		allowN(lim, "k", 10)
		time.Sleep(time.Second - time.Nanosecond)
		allowN(lim, "k", 1)
		if shared.leased["k"] != 1 || shared.exact["k"] != 11 {
			t.Errorf("%d lease calls, %d exact: want 1 and every request exact", shared.leased["k"], shared.exact["k"])
		}
		time.Sleep(time.Nanosecond)
		allowN(lim, "k", 1)
		if shared.leased["k"] != 2 {
			t.Errorf("a lease time later: %d lease calls, want 2", shared.leased["k"])
		}
	})
}

// TestLeaseOfOneUnit: a renewal granted a single unit (what was left of
// a window) holds it.
func TestLeaseOfOneUnit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newScripted()
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		lim := newLimiter(t, tier, fixed(t, 10, time.Hour))
		l := lim.Limits()[0].Driver()
		allowN(lim, "k", 2) // a lease of 2: 4 counted
		shared.take(t, &l, "k", time.Now(), 1)
		allowN(lim, "k", 2) // the lease used: a renewal of 2, granted 1
		if h := tier.Holding(time.Now()); h.Units != 1 {
			t.Fatalf("%+v, want the unit left held", h)
		}
		st := tier.Stats()
		d, _ := lim.Allow(context.Background(), "k", time.Now(), 1) // its renewal is refused
		synctest.Wait()
		if !d.Allowed || tier.Stats().Local != st.Local+1 {
			t.Errorf("%+v, %+v: want admitted from the lease of 1", d, tier.Stats())
		}
	})
}

// TestWindowLittleLeftOneByOne: a fixed window's lease refused with a
// request's worth still left (others took the rest while it was asked
// for, three times) leaves the key's requests to the shared store one by
// one, asking no lease for an eighth of a lease time; the lease in hand
// is used meanwhile, with the shared store's figures at the refusal.
func TestWindowLittleLeftOneByOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newScripted()
		lim := newLimiter(t, leases.New(shared, leases.Options{LeaseTime: time.Second, MaxShare: 0.1, MinLease: 8}), fixed(t, 100, time.Hour))
		l := lim.Limits()[0].Driver()
		ctx := context.Background()
		allowN(lim, "k", 8+4) // a lease of 8, 4 of it used
		var leftAt []int64    // the lease calls' sizes
		shared.set(func(s *scripted) {
			s.before = func(_ context.Context, _ []driver.Limit, _ driver.Keys, now time.Time, n int64) {
				if n > 1 {
					if len(leftAt) < 4 {
						s.take(t, &l, "k", now, []int64{6, 4, 2, 1}[len(leftAt)])
					}
					leftAt = append(leftAt, n)
				}
			}
		})
		allowN(lim, "k", 1) // 3 left in hand: a renewal of 8, refused 4 times
		if fmt.Sprint(leftAt) != "[8 6 4 2]" {
			t.Fatalf("lease calls of %v, want 8, then what was left three times: 6, 4, 2", leftAt)
		}
		leased := shared.leased["k"]
		d, _ := lim.Allow(ctx, "k", time.Now(), 1)
		if !d.Allowed || d.Remaining != 1+2 {
			t.Errorf("from the lease: %+v, want 1 left in the shared store and 2 in hand", d)
		}
		allowN(lim, "k", 2) // the lease used up
		time.Sleep(time.Second/8 - time.Nanosecond)
		exact := shared.exact["k"]
		if d, err := lim.Allow(ctx, "k", time.Now(), 1); err != nil || !d.Allowed || shared.exact["k"] != exact+1 {
			t.Errorf("past the lease: %+v %v, want the last unit admitted by the shared store", d, err)
		}
		synctest.Wait()
		if shared.leased["k"] != leased {
			t.Errorf("within an eighth of a lease time: %d lease calls more", shared.leased["k"]-leased)
		}
		time.Sleep(time.Nanosecond)
		allowN(lim, "k", 1)
		if shared.leased["k"] != leased+1 {
			t.Errorf("an eighth of a lease time later: %d lease calls more, want 1", shared.leased["k"]-leased)
		}
	})
}

// TestLeasedAgainAfterRefusal: a token bucket's key that ran dry and is
// leased again is no longer refused here: a request its lease does not
// cover while the next lease is asked for goes to the shared store.
func TestLeasedAgainAfterRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newScripted()
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		lim := newLimiter(t, tier, bucket(t, 10, time.Second, 10))
		ctx := context.Background()
		allowN(lim, "k", 10) // the bucket spent: a lease refused
		if d, _ := lim.Allow(ctx, "k", time.Now(), 1); d.Allowed {
			t.Fatalf("past the bucket: %+v", d)
		}
		time.Sleep(time.Second) // full again
		allowN(lim, "k", 1)     // refused here while a lease is asked for
		if h := tier.Holding(time.Now()); h.Units < 3 {
			t.Fatalf("%+v: want leased again", h)
		}
		// Renewals take a while now: use the lease down to its renewal,
		// then a request heavier than what is left.
		shared.set(func(s *scripted) { s.leaseLatency = time.Millisecond })
		for tier.Holding(time.Now()).Units > 1 {
			if d, _ := lim.Allow(ctx, "k", time.Now(), 1); !d.Allowed {
				t.Fatalf("from the lease: %+v", d)
			}
		}
		st := tier.Stats()
		if d, err := lim.Allow(ctx, "k", time.Now(), 2); err != nil || !d.Allowed || tier.Stats().Shared != st.Shared+1 {
			t.Errorf("a request of 2 with 1 in hand: %+v %v, want admitted by the shared store", d, err)
		}
		time.Sleep(time.Millisecond) // the renewal ends
	})
}

// checking is a shared store with its own check of a limit's
// parameters, and a fallback rule it may be following.
type checking struct {
	driver.Store
	degraded bool
}

var errChecked = errors.New("checked")

func (checking) Check(limiter.Limit) error { return errChecked }
func (c checking) Degraded() bool          { return c.degraded }

// TestPassesThrough: the shared store's check, its fallback state and
// its concurrency slots are the tier's.
func TestPassesThrough(t *testing.T) {
	fw := fixed(t, 10, time.Hour)
	mem := memstore.New(memstore.Options{})
	ctx := context.Background()
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	overMem, overChecking := leases.New(mem, leases.Options{}), leases.New(checking{Store: mem, degraded: true}, leases.Options{})
	if err := overMem.Check(fw); err != nil {
		t.Errorf("Check over a store without one: %v", err)
	}
	if err := overChecking.Check(fw); err != errChecked {
		t.Errorf("Check over a store with one: %v, want its error", err)
	}
	if overMem.Degraded() || !overChecking.Degraded() || leases.New(checking{Store: mem}, leases.Options{}).Degraded() {
		t.Error("Degraded is not the shared store's")
	}
	sl, ok, err := overMem.Take(ctx, "c", "k", 1, now)
	if err != nil || !ok {
		t.Fatalf("Take: %v %v", ok, err)
	}
	if _, ok, _ := overMem.Take(ctx, "c", "k", 1, now); ok {
		t.Error("a second slot of a limit of 1")
	}
	overMem.Give(sl)
	if mem.SlotsHeld("c", "k") != 0 {
		t.Error("Give did not give the slot back")
	}
	if _, ok, err := overChecking.Take(ctx, "c", "k", 1, now); ok || err == nil {
		t.Errorf("Take over a store without slots: %v %v, want an error", ok, err)
	}
	overChecking.Give(sl) // nothing to give it to
}
