package leases_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// bounded makes every limit it is handed Bounded before the tier sees it,
// so that the conformance suite, which builds Exact limits, runs the
// tier's Bounded path.
type bounded struct{ *leases.Store }

func (b bounded) conv(limits []driver.Limit) []driver.Limit {
	out := make([]driver.Limit, len(limits))
	for i := range limits {
		out[i] = limits[i].WithAccuracy(driver.Bounded)
	}
	return out
}

func (b bounded) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	return b.Store.Decide(ctx, b.conv(limits), keys, now, n)
}

// TestConformanceExact: with only Exact limits the tier is the shared
// store, decision for decision.
func TestConformanceExact(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store {
		return leases.New(memstore.New(memstore.Options{}), leases.Options{})
	})
}

// TestConformanceCold: Bounded limits whose keys never reach MinLease
// are decided exactly by the shared store: the whole suite holds.
func TestConformanceCold(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store {
		return bounded{leases.New(memstore.New(memstore.Options{}), leases.Options{MinLease: math.MaxInt64})}
	})
}

// recording is a shared store with a latency, which counts its calls per
// key: exact ones (weight 1) and leases (weight > 1, the requests of
// these tests all weighing 1).
type recording struct {
	driver.Store
	latency time.Duration
	mu      sync.Mutex
	exact   map[string]int
	leased  map[string]int
	fail    bool
	// failLeases fails the leases (weight > 1) alone.
	failLeases bool
}

func newRecording(latency time.Duration) *recording {
	return &recording{Store: memstore.New(memstore.Options{}), latency: latency, exact: map[string]int{}, leased: map[string]int{}}
}

func (r *recording) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	time.Sleep(r.latency)
	r.mu.Lock()
	k := keys.For(0)
	if n > 1 {
		r.leased[k]++
	} else {
		r.exact[k]++
	}
	fail := r.fail || r.failLeases && n > 1
	r.mu.Unlock()
	if fail {
		return driver.Decision{}, fmt.Errorf("down: %w", driver.ErrStoreUnavailable)
	}
	return r.Store.Decide(ctx, limits, keys, now, n)
}

// newLimiter binds l, Bounded, into a Limiter "p" over store.
func newLimiter(t testing.TB, store limiter.Store, l limiter.Limit) *limiter.Limiter {
	t.Helper()
	return bind(t, store, l.WithAccuracy(limiter.Bounded))
}

// bind binds limits, in order and each with the accuracy it has, into a
// Limiter "p" over store.
func bind(t testing.TB, store limiter.Store, limits ...limiter.Limit) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.New(store, "p", limits...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// tiered sets up a tier with opt over a fresh recording shared store (no
// latency), and a Limiter "p" of l, Bounded, over the tier.
func tiered(t testing.TB, opt leases.Options, l limiter.Limit) (shared *recording, tier *leases.Store, lim *limiter.Limiter) {
	t.Helper()
	shared = newRecording(0)
	tier = leases.New(shared, opt)
	return shared, tier, newLimiter(t, tier, l)
}

// fixed returns a fixed window of limit requests a window, Exact.
func fixed(t testing.TB, limit int64, window time.Duration) limiter.Limit {
	t.Helper()
	return must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limit, Window: window}))
}

// sliding returns a sliding log of limit requests a window, Exact.
func sliding(t testing.TB, limit int64, window time.Duration) limiter.Limit {
	t.Helper()
	return must(t)(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: limit, Window: window}))
}

// bucket returns a token bucket of burst requests, refilled at n a per,
// Exact.
func bucket(t testing.TB, n int64, per time.Duration, burst int64) limiter.Limit {
	t.Helper()
	return must(t)(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: n, Per: per}, Burst: burst}))
}

// must returns a function that returns the limit it is handed, failing t
// on its error: must(t)(limiter.NewFixedWindow(p)) for the parameters
// fixed, sliding and bucket do not take (a cost).
func must(t testing.TB) func(limiter.Limit, error) limiter.Limit {
	return func(l limiter.Limit, err error) limiter.Limit {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// admission is one admitted request.
type admission struct {
	key string
	at  time.Time
}

// simulation drives instances over one shared store for dur, each
// sending rate requests a second (open loop, each request on its own
// goroutine) on keys drawn from one Zipf distribution per instance.
type simulation struct {
	instances int
	rate      float64 // requests a second, per instance
	keys      uint64
	zipfS     float64
	dur       time.Duration
	latency   time.Duration
	opt       leases.Options
	limit     limiter.Limit
	// churn, if set, has the last instance start a third of the way in
	// and the first stop two thirds of the way: each takes its leases
	// with it, the bound holding still.
	churn bool
}

type outcome struct {
	sent     map[string]int
	sentAt   []map[string][]time.Time // per instance
	admitted []admission
	shared   *recording
	tiers    []*leases.Store
	lim      *limiter.Limiter // the first instance's, for its Limits
}

func (sim simulation) run(t *testing.T) outcome {
	out := outcome{sent: map[string]int{}, shared: newRecording(sim.latency)}
	for range sim.instances {
		out.sentAt = append(out.sentAt, map[string][]time.Time{})
	}
	var mu sync.Mutex
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range sim.instances {
			tier := leases.New(out.shared, sim.opt)
			out.tiers = append(out.tiers, tier)
			lim := newLimiter(t, tier, sim.limit)
			if i == 0 {
				out.lim = lim
			}
			zipf := rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 7)), sim.zipfS, 1, sim.keys-1)
			wg.Go(func() {
				start := time.Now()
				from, until := time.Duration(0), sim.dur
				if sim.churn && i == sim.instances-1 {
					from = sim.dur / 3
				}
				if sim.churn && i == 0 {
					until = 2 * sim.dur / 3
				}
				interval := time.Duration(float64(time.Second) / sim.rate)
				for k := 0; ; k++ {
					at := start.Add(from + time.Duration(k)*interval)
					if at.Sub(start) >= until {
						return
					}
					time.Sleep(time.Until(at))
					key := fmt.Sprint("k", zipf.Uint64())
					mu.Lock()
					out.sent[key]++
					out.sentAt[i][key] = append(out.sentAt[i][key], at)
					mu.Unlock()
					wg.Go(func() {
						now := time.Now()
						d, err := lim.Allow(context.Background(), key, now, 1)
						if err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						if d.Allowed {
							mu.Lock()
							out.admitted = append(out.admitted, admission{key, now})
							mu.Unlock()
						}
					})
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Minute) // the last renewals end
	})
	sort.Slice(out.admitted, func(i, j int) bool { return out.admitted[i].at.Before(out.admitted[j].at) })
	return out
}

// perKey returns each key's admission instants, in order.
func (o outcome) perKey() map[string][]time.Time {
	m := map[string][]time.Time{}
	for _, a := range o.admitted {
		m[a.key] = append(m[a.key], a.at)
	}
	return m
}

// maxInWindow returns the most instants of ts (sorted) in any interval
// [a, a+w).
func maxInWindow(ts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// hotLocal checks that of every key sent at least hot requests, 99% were
// decided without a call of the shared store.
func (o outcome) hotLocal(t *testing.T, hot int) {
	t.Helper()
	n := 0
	calls, decisions := 0, 0
	for key, sent := range o.sent {
		calls += o.shared.exact[key] + o.shared.leased[key]
		decisions += sent
	}
	st := o.tiers[0].Stats()
	t.Logf("%d requests, %d calls of the shared store (%.4f a decision); instance 0: %+v", decisions, calls, float64(calls)/float64(decisions), st)
	for key, sent := range o.sent {
		if sent < hot {
			continue
		}
		n++
		exact := o.shared.exact[key]
		local := 1 - float64(exact)/float64(sent)
		t.Logf("hot key %s: %d sent, %.2f%% decided locally, %d leases", key, sent, 100*local, o.shared.leased[key])
		if local < 0.99 {
			t.Errorf("hot key %s: %d of %d requests went to the shared store (%.2f%% local, want ≥ 99%%)", key, exact, sent, 100*local)
		}
	}
	if n == 0 {
		t.Fatal("no hot key: the test measures nothing")
	}
}

// coldExact checks that the keys no instance was sent MinLease requests
// of within a LeaseTime never had a lease, and that every request of
// theirs went to the shared store.
func (o outcome) coldExact(t *testing.T, sim simulation) {
	t.Helper()
	n := 0
	for key, sent := range o.sent {
		cold := true
		for i := range o.sentAt {
			if maxInWindow(o.sentAt[i][key], sim.opt.LeaseTime) >= int(sim.opt.MinLease) {
				cold = false
			}
		}
		if !cold {
			continue
		}
		n++
		if o.shared.leased[key] != 0 || o.shared.exact[key] != sent {
			t.Errorf("cold key %s (%d sent): %d leases, %d exact decisions; want 0 and %d", key, sent, o.shared.leased[key], o.shared.exact[key], sent)
		}
	}
	if n == 0 {
		t.Fatal("no cold key: the test measures nothing")
	}
}

// zipfInstances is the three instances' simulation of the tests below:
// 9,000 requests a second each for 3 s over 300 Zipf keys (s = 1.3), on a
// shared store 1 ms away, leases of at most 4% of a quota of 6,000 lasting
// 500 ms; churn as simulation's.
func zipfInstances(l limiter.Limit, churn bool) simulation {
	opt := leases.Options{LeaseTime: 500 * time.Millisecond, MaxShare: 0.04, MinLease: 8}
	return simulation{instances: 3, rate: 9000, keys: 300, zipfS: 1.3, dur: 3 * time.Second, latency: time.Millisecond, opt: opt, limit: l, churn: churn}
}

// TestInstancesFixedWindow: three instances over one shared store with
// 1 ms of latency, Zipf keys, a fixed window of 6000 a second: no key
// is ever admitted more than the limit in a window (a fixed window's
// leases end with it), hot keys are decided locally, cold keys exactly.
func TestInstancesFixedWindow(t *testing.T) {
	sim := zipfInstances(fixed(t, 6000, time.Second), false)
	out := sim.run(t)
	lim := out.lim.Limits()[0].Driver()
	if b := out.tiers[0].Bound(&lim, 3); b != 0 {
		t.Fatalf("Bound of a fixed window = %v, want 0", b)
	}
	perWindow := map[string]map[int64]int{}
	for _, a := range out.admitted {
		w := a.at.UnixNano() / int64(time.Second)
		if perWindow[a.key] == nil {
			perWindow[a.key] = map[int64]int{}
		}
		perWindow[a.key][w]++
	}
	top := 0
	for key, ws := range perWindow {
		for w, c := range ws {
			if c > 6000 {
				t.Errorf("key %s window %d: %d admitted, limit 6000", key, w, c)
			}
			top = max(top, c)
		}
	}
	// The hottest key asks for far more than the limit: what leases left
	// unused is at most 1.5 leases an instance (1,080 units).
	t.Logf("most admitted in a window: %d of 6000", top)
	if top < 6000-3*360 {
		t.Errorf("the hottest key was admitted at most %d in a window: leases under-admit more than their bound", top)
	}
	out.hotLocal(t, 6000)
	out.coldExact(t, sim)
}

// TestNearLimit: three instances send one key 96% of a fixed window's
// limit together: leases take nothing from what an exact decision would
// admit, every request is (no lease is left to end unused while another
// instance is refused).
func TestNearLimit(t *testing.T) {
	opt := leases.Options{LeaseTime: 500 * time.Millisecond, MaxShare: 0.1, MinLease: 8}
	sim := simulation{instances: 3, rate: 64, keys: 2, zipfS: 50, dur: 6 * time.Second, latency: time.Millisecond, opt: opt, limit: fixed(t, 400, 2*time.Second)}
	out := sim.run(t)
	if len(out.sent) != 1 || len(out.admitted) != out.sent["k0"] {
		t.Errorf("sent %v, %d admitted: a key under its limit must be admitted whole", out.sent, len(out.admitted))
	}
	if out.shared.leased["k0"] == 0 {
		t.Error("no lease was taken: the test checks nothing")
	}
}

// TestInstancesTokenBucket: as TestInstancesFixedWindow with a token
// bucket of burst 6000 and 1000 a second, whose bound is N × 1.5 ×
// MaxLease: over every interval of a second a key is admitted at most
// 6000 + 1000 + the bound, and over the whole run 6000 + 1000 × 3s + the
// bound; the hottest key asks for more than both.
func TestInstancesTokenBucket(t *testing.T) {
	sim := zipfInstances(bucket(t, 1000, time.Second, 6000), false)
	out := sim.run(t)
	lim := out.lim.Limits()[0].Driver()
	bound := out.tiers[0].Bound(&lim, 3)
	if want := 3 * 1.5 * 240.0 / 6000; math.Abs(bound-want) > 1e-9 {
		t.Fatalf("Bound = %v, want %v", bound, want)
	}
	worst, whole := 0, 0
	for key, ts := range out.perKey() {
		c := maxInWindow(ts, time.Second)
		worst, whole = max(worst, c), max(whole, len(ts))
		if float64(c) > 7000+bound*6000 {
			t.Errorf("key %s: %d admitted in one second, exact allows 7000 and the bound %.0f more", key, c, bound*6000)
		}
		if float64(len(ts)) > 9000+bound*6000 {
			t.Errorf("key %s: %d admitted in all, exact allows 9000 and the bound %.0f more", key, len(ts), bound*6000)
		}
	}
	t.Logf("most admitted in a second: %d (exact: 7000), in all: %d (exact: 9000); the bound: %.0f more", worst, whole, bound*6000)
	if whole < 9000-3*360 {
		t.Errorf("the hottest key was admitted %d in all: leases under-admit more than their bound", whole)
	}
	out.hotLocal(t, 6000)
	out.coldExact(t, sim)
}

// TestInstancesSlidingLog: a sliding log over any window of a second,
// limit × (1 + bound), while one instance starts a second in and another
// stops two seconds in.
func TestInstancesSlidingLog(t *testing.T) {
	sim := zipfInstances(sliding(t, 6000, time.Second), true)
	out := sim.run(t)
	lim := out.lim.Limits()[0].Driver()
	bound := out.tiers[0].Bound(&lim, 3)
	worst := 0
	for key, ts := range out.perKey() {
		c := maxInWindow(ts, time.Second)
		worst = max(worst, c)
		if float64(c) > 6000*(1+bound) {
			t.Errorf("key %s: %d admitted in one second, limit 6000 × (1 + %.3f)", key, c, bound)
		}
	}
	t.Logf("most admitted in any second: %d; limit 6000, bound %.3f (%.0f)", worst, bound, 6000*(1+bound))
	out.hotLocal(t, 6000)
	out.coldExact(t, sim)
}

// TestStoreDown: a lease in hand is used while the shared store fails;
// past it, the shared store's error comes back (the Redis store's
// on_error decides then), and no lease is taken from a failing store.
func TestStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, tier, lim := tiered(t, leases.Options{LeaseTime: time.Second, MaxShare: 0.1, MinLease: 4}, fixed(t, 1000, time.Minute))
		ctx := context.Background()
		// Heat the key: 4 admissions make it hot; a lease of what it
		// was sent in the last second follows, and grows with its rate.
		admitN(t, lim, "k", 60)
		held := tier.Holding(time.Now()).Units
		if shared.leased["k"] < 2 || held < 20 {
			t.Fatalf("%d leases, %d units held; want leases growing with the rate", shared.leased["k"], held)
		}
		grants := shared.leased["k"]
		shared.mu.Lock()
		shared.fail = true
		shared.mu.Unlock()
		local := 0
		for range 200 {
			d, err := lim.Allow(ctx, "k", time.Now(), 1)
			synctest.Wait()
			if err == nil && d.Allowed {
				local++
				continue
			}
			if !errors.Is(err, limiter.ErrStoreUnavailable) {
				t.Fatalf("past the lease: %+v %v, want the shared store's error", d, err)
			}
		}
		if int64(local) != held {
			t.Errorf("%d admitted while the store was down, want the %d units the lease held", local, held)
		}
		if st := tier.Stats(); st.LeaseErrors == 0 || st.LeasesGranted != uint64(grants) {
			t.Errorf("stats %+v: want lease errors and the %d grants", st, grants)
		}
	})
}

// TestMultiLimitGivesBack: a request admitted from a lease but refused
// by another limit takes nothing from the lease.
func TestMultiLimitGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tier := leases.New(newRecording(0), leases.Options{LeaseTime: time.Minute, MaxShare: 0.1, MinLease: 4})
		lim := bind(t, tier, fixed(t, 1000, time.Hour).WithAccuracy(limiter.Bounded), fixed(t, 10, time.Hour))
		ctx := context.Background()
		admitN(t, lim, "k", 10) // within both limits
		synctest.Wait()         // a grant they started has landed
		before := tier.Holding(time.Now()).Units
		if before == 0 {
			t.Fatal("no lease held: the test checks nothing")
		}
		leased := tier.Stats().LeasedUnits
		for range 5 {
			if d, _ := lim.Allow(ctx, "k", time.Now(), 1); d.Allowed || d.Index != 1 {
				t.Fatalf("over the strict limit: %+v", d)
			}
			// A refusal's take may start a renewal (what is left falls
			// under half before the units go back): let it land, and
			// count what it added.
			synctest.Wait()
		}
		renewed := int64(tier.Stats().LeasedUnits - leased)
		if after := tier.Holding(time.Now()).Units; after != before+renewed {
			t.Errorf("lease held %d before the refusals, %d after, %d leased meanwhile: want %d", before, after, renewed, before+renewed)
		}
	})
}

// TestResetDropsLease: Reset forgets the lease, and the key is fresh in
// the shared store.
func TestResetDropsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, tier, lim := tiered(t, leases.Options{LeaseTime: time.Minute, MaxShare: 0.1, MinLease: 4}, fixed(t, 100, time.Hour))
		ctx := context.Background()
		allowN(lim, "k", 50)
		if tier.Holding(time.Now()).Keys != 1 {
			t.Fatal("no lease held")
		}
		if err := lim.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if h := tier.Holding(time.Now()); h.Keys != 0 {
			t.Errorf("after Reset: %+v", h)
		}
		d, _ := lim.Peek(ctx, "k", time.Now())
		if d.Remaining != 99 {
			t.Errorf("after Reset the shared store has %d remaining, want a fresh key's 99 after one", d.Remaining)
		}
	})
}

// TestLeakyStaysExact: a leaky bucket cannot be Bounded; a scaled limit
// keeps its accuracy.
func TestLeakyStaysExact(t *testing.T) {
	lb, err := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Queue: 5})
	if err != nil {
		t.Fatal(err)
	}
	if a := lb.WithAccuracy(limiter.Bounded).Accuracy(); a != limiter.Exact {
		t.Errorf("leaky bucket accuracy %v, want exact", a)
	}
	// A per-key override scales a limit: it stays as accurate as the
	// policy's, and says so.
	scaled, err := bucket(t, 10, time.Second, 100).WithAccuracy(limiter.Bounded).Scaled(2)
	if err != nil || scaled.Accuracy() != limiter.Bounded || !strings.Contains(scaled.String(), "accuracy=bounded") {
		t.Errorf("scaled: %v %v, want a bounded limit", scaled, err)
	}
}

// TestDefaults: the zero Options take every default: leases of 1% of
// the quota, lasting a second, from 8 admissions on; a renewal the
// shared store does not answer ends after a second.
func TestDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newRecording(0)
		tier := leases.New(shared, leases.Options{})
		if tier.MaxShare() != leases.DefaultMaxShare {
			t.Errorf("MaxShare %v, want %v", tier.MaxShare(), leases.DefaultMaxShare)
		}
		fw := fixed(t, 100_000, time.Hour)
		lim := newLimiter(t, tier, fw)
		d := lim.Limits()[0].Driver()
		if got := tier.MaxLease(&d); got != 1000 {
			t.Errorf("MaxLease %d, want 1%% of 100000", got)
		}
		ctx := context.Background()
		now := time.Now()
		g, err := tier.Lease(ctx, &d, "k", now, 10)
		if err != nil || g.Units != 10 || !g.Expires.Equal(now.Add(leases.DefaultLeaseTime)) {
			t.Errorf("Lease: %+v %v, want 10 units for %v", g, err, leases.DefaultLeaseTime)
		}
		for i := range leases.DefaultMinLease {
			lim.Allow(ctx, "m", time.Now(), 1)
			synctest.Wait()
			if want := map[bool]int{true: 1, false: 0}[i == leases.DefaultMinLease-1]; shared.leased["m"] != want {
				t.Fatalf("after %d admissions, %d leases; want %d", i+1, shared.leased["m"], want)
			}
		}
		// A shared store that never answers: the renewal gives up after
		// DefaultRenewTimeout.
		hung := &hanging{Store: memstore.New(memstore.Options{})}
		tier = leases.New(hung, leases.Options{})
		lim = newLimiter(t, tier, fw)
		// Leases hang from the start: the renewal the last of these
		// requests starts (the key hot) runs on its own goroutine, and
		// could be granted before a later Store.
		hung.hang.Store(true)
		for range leases.DefaultMinLease {
			lim.Allow(ctx, "h", time.Now(), 1)
		}
		start := time.Now()
		synctest.Wait()
		time.Sleep(leases.DefaultRenewTimeout - time.Millisecond)
		synctest.Wait()
		if st := tier.Stats(); st.LeaseErrors != 0 {
			t.Fatalf("the renewal gave up after %v", time.Since(start))
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if st := tier.Stats(); st.LeaseErrors != 1 {
			t.Errorf("after %v: %+v, want the renewal given up", time.Since(start), st)
		}
	})
}

// hanging is a store whose Decide waits for its context's end while
// hang is set.
type hanging struct {
	driver.Store
	hang atomic.Bool
}

func (h *hanging) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	if h.hang.Load() && n > 1 {
		<-ctx.Done()
		return driver.Decision{}, fmt.Errorf("%w: %w", driver.ErrStoreUnavailable, ctx.Err())
	}
	return h.Store.Decide(ctx, limits, keys, now, n)
}

// TestMaxKeys: past MaxKeys tracked keys, a new key is decided by the
// shared store (exactly, never leased) until an idle one can be dropped.
func TestMaxKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, tier, lim := tiered(t, leases.Options{MaxKeys: 64, MinLease: 2, MaxShare: 0.5, LeaseTime: time.Second}, fixed(t, 1000, time.Hour))
		ctx := context.Background()
		// 64 shards of one key each: the first keys fill them, busy.
		for i := range 2000 {
			lim.Allow(ctx, fmt.Sprint("k", i%500), time.Now(), 1)
			synctest.Wait()
		}
		if h := tier.Holding(time.Now()); h.Keys > 64 {
			t.Errorf("%d keys hold leases, MaxKeys is 64", h.Keys)
		}
		// Idle for two lease times: a new key finds room and is leased.
		time.Sleep(3 * time.Second)
		allowN(lim, "fresh", 4)
		if shared.leased["fresh"] == 0 {
			t.Error("a new key after the others went idle was never leased")
		}
	})
}

// TestBound: the bound of each kind of limit, as a fraction of its
// quota: none for an exact limit, a fixed window, or a limit too small
// to lease; N × 1.5 × MaxLease × cost ÷ quota otherwise.
func TestBound(t *testing.T) {
	tier := leases.New(newRecording(0), leases.Options{MaxShare: 0.01, MinLease: 8})
	bound := func(l limiter.Limit, acc limiter.Accuracy) float64 {
		lim, err := limiter.New(tier, "b", l.WithAccuracy(acc))
		if err != nil {
			t.Fatal(err)
		}
		d := lim.Limits()[0].Driver()
		return tier.Bound(&d, 4)
	}
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Burst: 10_000, Cost: 3})
	sl, small, fw := sliding(t, 5000, time.Minute), sliding(t, 799, time.Minute), fixed(t, 100_000, time.Minute)
	for _, c := range []struct {
		name string
		l    limiter.Limit
		acc  limiter.Accuracy
		want float64
	}{
		{"exact", sl, limiter.Exact, 0},
		{"fixed window", fw, limiter.Bounded, 0},
		{"too small to lease", small, limiter.Bounded, 0}, // MaxLease 7 < 8
		{"sliding log", sl, limiter.Bounded, 4 * 1.5 * 50 / 5000.0},
		{"token bucket, cost 3", tb, limiter.Bounded, 4 * 1.5 * 33 * 3 / 10_000.0}, // MaxLease ⌊100/3⌋
	} {
		if got := bound(c.l, c.acc); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: Bound = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestHoldingAndStats: what an instance holds and counts, exactly, over
// a key made hot, its lease used, and its lease's end.
func TestHoldingAndStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1000, Window: time.Hour, Cost: 2}))
		_, tier, lim := tiered(t, leases.Options{LeaseTime: time.Second, MaxShare: 0.1, MinLease: 4}, fw)
		ctx := context.Background()
		allowN(lim, "k", 4)
		// A lease of max(min_lease, rate/2) = 4 requests, 8 units.
		want := leases.Holding{Units: 8, Keys: 1, MaxRatio: 8.0 / 1000}
		if h := tier.Holding(time.Now()); h != want {
			t.Fatalf("Holding after the first lease: %+v, want %+v", h, want)
		}
		lim.Allow(ctx, "k", time.Now(), 1) // from the lease
		if h := tier.Holding(time.Now()); h.Units != 6 || h.Keys != 1 {
			t.Errorf("Holding after one request from the lease: %+v, want 6 units", h)
		}
		st := tier.Stats()
		wantSt := leases.Stats{Local: 1, Shared: 4, LeaseCalls: 1, LeasesGranted: 1, LeasedUnits: 4}
		if st != wantSt {
			t.Errorf("Stats %+v, want %+v", st, wantSt)
		}
		time.Sleep(time.Second) // the lease ends
		if h := tier.Holding(time.Now()); h != (leases.Holding{}) {
			t.Errorf("Holding after the lease's end: %+v, want nothing", h)
		}
	})
}

// TestRefusedLocallyFolds: a request two of whose Bounded limits refuse
// it here is refused as Decision.Merge folds them (the longer wait, the
// figures of the one that resets last), nothing taken from a third
// limit's lease, and the shared store never asked.
func TestRefusedLocallyFolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newRecording(0)
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		big, a, b := refusingLimits(t)
		lim := bind(t, tier, big.WithAccuracy(limiter.Bounded), a.WithAccuracy(limiter.Bounded), b.WithAccuracy(limiter.Bounded))
		ctx := context.Background()
		admitN(t, lim, "k", 4) // within every limit
		// a and b are spent: the next is refused by Redis, then here.
		lim.Allow(ctx, "k", time.Now(), 1)
		synctest.Wait()
		held := tier.Holding(time.Now()).Units
		calls := shared.calls("k")
		d, err := lim.Allow(ctx, "k", time.Now(), 1)
		if err != nil || d.Allowed || d.Index != 2 {
			t.Fatalf("over a and b: %+v %v, want refused with b's figures (it resets last)", d, err)
		}
		if d.RetryAfter <= time.Minute || d.RetryAfter > 2*time.Minute {
			t.Errorf("RetryAfter %v, want b's, the longer (over 1m, up to 2m)", d.RetryAfter)
		}
		if h := tier.Holding(time.Now()).Units; h != held {
			t.Errorf("the lease of the first limit held %d, then %d", held, h)
		}
		if c := shared.calls("k"); c != calls {
			t.Errorf("the shared store was asked %d times more", c-calls)
		}
	})
}

// TestLocalFigures: a request decided from a lease carries the shared
// store's figures at the lease plus the lease in hand; one refused here,
// the wait the shared store named and nothing remaining.
func TestLocalFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 40, Window: time.Hour, Cost: 2}))
		shared, _, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.1, MinLease: 2}, fw)
		ctx := context.Background()
		end := time.Now().Truncate(time.Hour).Add(time.Hour)
		allowN(lim, "k", 2)
		if shared.leased["k"] != 1 {
			t.Fatalf("%d leases, want 1", shared.leased["k"])
		}
		time.Sleep(time.Minute)
		// Redis holds 40 − 8 = 32 units after the lease; the lease 1
		// request (2 units) after this one.
		d, err := lim.Allow(ctx, "k", time.Now(), 1)
		want := limiter.Decision{Allowed: true, Limit: 40, Remaining: 32 + 2, ResetAt: end, Next: time.Hour}
		if err != nil || d != want {
			t.Errorf("from the lease:\n got %+v\nwant %+v", d, want)
		}
		// Spend the rest through Redis, then a refusal.
		allowN(lim, "k", 20)
		calls := shared.calls("k")
		time.Sleep(time.Minute)
		d, err = lim.Allow(ctx, "k", time.Now(), 1)
		wait := time.Until(end)
		want = limiter.Decision{RetryAfter: wait, Limit: 40, ResetAt: end, Next: wait}
		if err != nil || d != want {
			t.Errorf("refused here:\n got %+v\nwant %+v", d, want)
		}
		if c := shared.calls("k"); c != calls {
			t.Errorf("the refusal asked the shared store %d times", c-calls)
		}
	})
}

// TestSomeLimitsToShared: of three limits, one decided from its lease,
// the other two by the shared store together: a request one of those two
// refuses is refused, with its figures, and gives the lease back.
func TestSomeLimitsToShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newRecording(0)
		tier := leases.New(shared, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2})
		lim := bind(t, tier, fixed(t, 1000, time.Hour).WithAccuracy(limiter.Bounded), fixed(t, 100, time.Hour), sliding(t, 6, time.Hour))
		ctx := context.Background()
		admitN(t, lim, "k", 6) // within every limit
		if shared.leased["k"] == 0 {
			t.Fatal("no lease: the test checks nothing")
		}
		held := tier.Holding(time.Now()).Units
		d, err := lim.Allow(ctx, "k", time.Now(), 1)
		if err != nil || d.Allowed || d.Index != 2 || d.Limit != 6 {
			t.Errorf("over the sliding log: %+v %v, want refused by limit 2 with its figures", d, err)
		}
		if h := tier.Holding(time.Now()).Units; h != held {
			t.Errorf("the lease held %d, then %d", held, h)
		}
	})
}

// TestLeaseSizes: a lease holds what the key's rate admits in half a
// lease time (at least MinLease, at most MaxLease), the rate measured
// over the last whole period of LeaseTime and the one going on; a key
// quiet for two periods is cold again.
func TestLeaseSizes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &sizing{recording: newRecording(0)}
		lim := newLimiter(t, leases.New(shared, leases.Options{LeaseTime: time.Second, MaxShare: 0.1, MinLease: 4}), fixed(t, 1000, time.Hour))
		ctx := context.Background()
		send := func(n int, every time.Duration) {
			for range n {
				lim.Allow(ctx, "k", time.Now(), 1)
				synctest.Wait()
				time.Sleep(every)
			}
		}
		// 4 admitted in the first period: hot at the 4th, a lease of
		// max(MinLease, 4/2) = 4.
		send(4, time.Millisecond)
		// 60 more within the second: the rate reaches 64 a period, and
		// leases grow to half of it, 32, never past MaxLease (100).
		time.Sleep(time.Second)
		send(60, 10*time.Millisecond)
		got := shared.sizes()
		if len(got) < 3 || got[0] != 4 || got[len(got)-1] > 100 {
			t.Fatalf("lease sizes %v: want 4 first, none past 100", got)
		}
		if top := slices.Max(got); top < 20 || top > 32 {
			t.Errorf("lease sizes %v: the largest should be about half the rate of 64 a period (32)", got)
		}
		// Quiet for two periods: cold, decided exactly until it is hot again.
		time.Sleep(2*time.Second + time.Millisecond)
		before := len(shared.sizes())
		send(3, time.Millisecond)
		if n := len(shared.sizes()); n != before {
			t.Errorf("a key quiet for two lease times was leased at its 3rd request: sizes %v", shared.sizes())
		}
		if e := shared.exact["k"]; e < 3 {
			t.Errorf("%d exact decisions, want the 3 after the quiet", e)
		}
	})
}

// sizing records the size of every lease asked for.
type sizing struct {
	*recording
	mu sync.Mutex
	ns []int64
}

func (s *sizing) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	if n > 1 {
		s.mu.Lock()
		s.ns = append(s.ns, n)
		s.mu.Unlock()
	}
	return s.recording.Decide(ctx, limits, keys, now, n)
}

func (s *sizing) sizes() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ns)
}

// TestEvictsIdleFirst: a full table drops a key that holds no lease and
// has been quiet for two lease times before a busy one.
func TestEvictsIdleFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One key a shard: a second key of the same shard must evict.
		shared, tier, lim := tiered(t, leases.Options{MaxKeys: 64, MinLease: 2, MaxShare: 0.5, LeaseTime: time.Second}, fixed(t, 1000, time.Hour))
		ctx := context.Background()
		// Keys 0..199 are sent once and go quiet; "busy" is kept hot.
		for i := range 200 {
			lim.Allow(ctx, fmt.Sprint("quiet", i), time.Now(), 1)
		}
		time.Sleep(3 * time.Second)
		allowN(lim, "busy", 50)
		if shared.leased["busy"] == 0 {
			t.Fatal("the busy key was never leased: the quiet keys kept it out")
		}
		// New keys now: they may take the quiet keys' places, never the
		// busy key's lease.
		held := tier.Holding(time.Now())
		for i := range 200 {
			lim.Allow(ctx, fmt.Sprint("new", i), time.Now(), 1)
		}
		if h := tier.Holding(time.Now()); h.Keys != held.Keys || h.Units != held.Units {
			t.Errorf("new keys evicted the busy key's lease: %+v before, %+v after", held, h)
		}
	})
}

// TestExactRefusalRemembered: a hot key whose lease cannot be had (the
// shared store fails leases) is decided exactly; once the shared store
// refuses it, it is refused here until the wait the shared store named,
// without asking again, and asks again after it.
func TestExactRefusalRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, _, lim := tiered(t, leases.Options{LeaseTime: time.Hour, MaxShare: 0.5, MinLease: 2}, fixed(t, 10, time.Minute))
		shared.failLeases = true
		ctx := context.Background()
		admitN(t, lim, "k", 10)                    // within the limit
		d, _ := lim.Allow(ctx, "k", time.Now(), 1) // refused by the shared store
		if d.Allowed {
			t.Fatal("the 11th admitted")
		}
		calls := shared.exact["k"]
		time.Sleep(30 * time.Second)
		d, _ = lim.Allow(ctx, "k", time.Now(), 1)
		if d.Allowed || shared.exact["k"] != calls {
			t.Errorf("within the wait: %+v, %d more calls; want refused here", d, shared.exact["k"]-calls)
		}
		if d.RetryAfter != 30*time.Second {
			t.Errorf("RetryAfter %v, want the 30 s left of the wait", d.RetryAfter)
		}
		time.Sleep(30 * time.Second)
		if d, _ = lim.Allow(ctx, "k", time.Now(), 1); !d.Allowed || shared.exact["k"] != calls+1 {
			t.Errorf("after the wait: %+v, %d more calls; want admitted by the shared store", d, shared.exact["k"]-calls)
		}
	})
}

// allowN sends n requests of key through lim, one at a time, each one's
// renewal (if any) done before the next (inside a synctest bubble).
func allowN(lim *limiter.Limiter, key string, n int) {
	for range n {
		lim.Allow(context.Background(), key, time.Now(), 1)
		synctest.Wait()
	}
}

// admitN is allowN, failing t unless each of the n requests is admitted.
func admitN(t testing.TB, lim *limiter.Limiter, key string, n int) {
	t.Helper()
	for i := range n {
		if d, err := lim.Allow(context.Background(), key, time.Now(), 1); err != nil || !d.Allowed {
			t.Fatalf("request %d of %d of %s: %+v %v, want admitted", i+1, n, key, d, err)
		}
		synctest.Wait()
	}
}

// refusingLimits returns the three fixed windows of the tests of a
// request refused here by two limits: big (1000 an hour), a (4 a minute)
// and b (4 every two minutes, the one that resets last).
func refusingLimits(t testing.TB) (big, a, b limiter.Limit) {
	t.Helper()
	return fixed(t, 1000, time.Hour), fixed(t, 4, time.Minute), fixed(t, 4, 2*time.Minute)
}

// calls is how many times r was asked to decide key, exactly or for a
// lease.
func (r *recording) calls(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exact[key] + r.leased[key]
}
