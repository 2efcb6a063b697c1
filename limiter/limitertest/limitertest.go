// Package limitertest is the conformance suite every limiter.Store must
// pass: the same step tables, reference-model traces and concurrency checks
// run against the memory store and the Redis store, so that both decide
// identically.
package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// NewStore makes a store for one subtest. It may register cleanups on t.
type NewStore func(t *testing.T) limiter.Store

// Options adapts the suite to a store.
type Options struct {
	// Resolution is the store's time resolution: instants are rounded down
	// to it, and Retry-After is compared after rounding the model's value
	// up to it. 0 means the nanosecond.
	Resolution time.Duration
	// Seeds is how many random traces RunModel drives through each
	// algorithm. 0 means 12; a store whose decisions cost a round trip
	// (Redis) runs fewer.
	Seeds int
	// Parallel runs RunModel's algorithms in parallel; newStore must then
	// give each subtest a store of its own (say, its own key prefix).
	Parallel bool
	// OneKey says the store decides a policy's limits under one client
	// key only (Redis Cluster): RunCharge leaves out keys per limit.
	OneKey bool
}

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) { RunWith(t, newStore, Options{}) }

// RunWith runs the whole suite with o.
func RunWith(t *testing.T, newStore NewStore, o Options) {
	t.Run("Model", func(t *testing.T) { RunModel(t, newStore, o) })
	t.Run("Boundary", func(t *testing.T) { RunBoundary(t, newStore) })
	t.Run("MultiLimit", func(t *testing.T) { RunMultiLimit(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { RunConcurrent(t, newStore) })
	t.Run("Reload", func(t *testing.T) { RunReload(t, newStore) })
	t.Run("PeekReset", func(t *testing.T) { RunPeekReset(t, newStore) })
	t.Run("Keys", func(t *testing.T) { RunKeys(t, newStore) })
	t.Run("Shared", func(t *testing.T) { RunShared(t, newStore) })
	t.Run("Charge", func(t *testing.T) { RunCharge(t, newStore, o) })
	t.Run("Calendar", func(t *testing.T) { RunCalendar(t, newStore, o) })
}

// RunKeys checks limits counted under different client keys in one
// decision (a policy limited per address and per API key at once): each
// limit counts its own key, and a request rejected by one consumes
// nothing from the other's key. Many goroutines on keys that overlap in
// both directions must neither lose nor double an admission, nor deadlock.
func RunKeys(t *testing.T, newStore NewStore) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	perIP := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 3, Window: time.Hour}))
	perKey := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 4, Window: time.Hour}))
	l := mustNew(t, store, "keys", perIP, perKey)
	now := time.Unix(0, base)
	allow := func(ip, apiKey string) limiter.Decision {
		t.Helper()
		d, err := l.AllowKeys(ctx, []string{ip, apiKey}, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// One address, two API keys: the address's 3 bind first.
	for i := range 3 {
		if d := allow("ip1", "key"+strconv.Itoa(i%2)); !d.Allowed {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	for range 5 {
		if d := allow("ip1", "key0"); d.Allowed || d.Index != 0 {
			t.Fatalf("4th request of ip1: %+v, want rejected by the per-address limit", d)
		}
	}
	// key0 has spent 2 of its 4 (the rejections took nothing): from other
	// addresses it gets exactly 2 more.
	for i, want := range []bool{true, true, false} {
		d := allow("ip"+strconv.Itoa(i+2), "key0")
		if d.Allowed != want || (!want && d.Index != 1) {
			t.Fatalf("key0 from ip%d: %+v, want allowed %v", i+2, d, want)
		}
	}
	// Concurrency: 16 goroutines, addresses and keys crossing, one instant.
	l2 := mustNew(t, store, "keys-concurrent", perIP, perKey)
	var admitted [4][4]atomic.Int64 // [ip][key]
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				ip, key := (g+i)%4, (g*3+i)%4
				d, err := l2.AllowKeys(ctx, []string{"ip" + strconv.Itoa(ip), "key" + strconv.Itoa(key)}, now, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[ip][key].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i := range 4 {
		var perIPTotal, perKeyTotal int64
		for j := range 4 {
			perIPTotal += admitted[i][j].Load()
			perKeyTotal += admitted[j][i].Load()
		}
		if perIPTotal > 3 || perKeyTotal > 4 {
			t.Errorf("ip%d admitted %d (limit 3), key%d admitted %d (limit 4)", i, perIPTotal, i, perKeyTotal)
		}
	}
}

// RunShared checks a limit shared by several policies (nginx's zones):
// both draw from one budget per key, the budget survives one policy's
// rebinding (a reload), and a policy's own limit of the same algorithm
// stays apart.
func RunShared(t *testing.T, newStore NewStore) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	now := time.Unix(0, base)
	zone := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 4})).Shared("zone")
	own := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 10}))
	root := mustNew(t, store, "root", zone)
	status := mustNew(t, store, "status", own, zone)
	if _, err := limiter.New(store, "twice", zone, zone); err == nil {
		t.Error("a share twice in one policy was accepted")
	}
	for i, l := range []*limiter.Limiter{root, status, root, status} {
		if d, _ := l.Allow(ctx, "k", now, 1); !d.Allowed {
			t.Fatalf("request %d: rejected: %+v", i, d)
		}
	}
	if d, _ := status.Allow(ctx, "k", now, 1); d.Allowed || d.Index != 1 {
		t.Fatalf("5th request through either policy: %+v, want rejected by the shared bucket", d)
	}
	if d, _ := root.Allow(ctx, "other", now, 1); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("another key: %+v, want a full bucket of its own", d)
	}
	// A reload rebinds root: the share keeps its state.
	root2 := mustNew(t, store, "root", zone)
	if d, _ := root2.Allow(ctx, "k", now.Add(time.Hour), 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after rebinding, an hour later: %+v, want the one refilled token taken", d)
	}
	// status's own bucket took only status's 2 admissions.
	ownOnly := mustNew(t, store, "status", own)
	if d, _ := ownOnly.Peek(ctx, "k", now); d.Remaining != 7 {
		t.Fatalf("status's own bucket: %+v, want 10 − 2 − this request = 7", d)
	}
}

// RunPeekReset checks the admin operations: Peek shows what Allow would
// decide without consuming anything, and Reset makes a key fresh again
// without touching other keys.
func RunPeekReset(t *testing.T, newStore NewStore) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	now := time.Unix(0, base)
	tb := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 3}))
	fw := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Hour}))
	l := mustNew(t, store, "admin", tb, fw)
	for range 3 {
		l.Allow(ctx, "a", now, 1)
		l.Allow(ctx, "b", now, 1)
	}
	for range 2 { // peeking twice changes nothing
		d, err := l.Peek(ctx, "a", now)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Index != 0 || d.Remaining != 0 || d.RetryAfter != time.Hour {
			t.Fatalf("Peek of a drained bucket: %+v", d)
		}
	}
	if d, _ := l.Peek(ctx, "fresh", now); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Peek of a fresh key: %+v, want allowed with 2 left after it", d)
	}
	if err := l.Reset(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "a", now, 1); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after Reset: %+v, want a fresh key", d)
	}
	if d, _ := l.Allow(ctx, "b", now, 1); d.Allowed {
		t.Fatalf("Reset of a reset b too: %+v", d)
	}
}

// base is a Unix instant on a whole day, far from the epoch.
var base = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano()

func mustNew(t testing.TB, store limiter.Store, policy string, limits ...limiter.Limit) *limiter.Limiter {
	t.Helper()
	l, err := limiter.New(store, policy, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func must(t testing.TB) func(limiter.Limit, error) limiter.Limit {
	return func(l limiter.Limit, err error) limiter.Limit {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// RunModel drives long random traces — several keys, costs, weights, and
// gaps that land on and next to window and refill edges — through the store
// and through the naive models of model.go, and requires every decision
// (admission, Retry-After, Remaining) to be identical.
func RunModel(t *testing.T, newStore NewStore, o Options) {
	res := int64(max(o.Resolution, 1))
	const (
		events = 2500
		keys   = 3
	)
	seeds := 12
	if o.Seeds > 0 {
		seeds = o.Seeds
	}
	periods := []time.Duration{time.Second, time.Minute, 7 * time.Second, time.Hour, 250 * time.Millisecond, 3 * time.Second}
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
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				capacity := 1 + rng.Int64N(20)
				cost := int64(1)
				if rng.IntN(3) == 0 {
					cost = 1 + rng.Int64N(min(capacity, 3))
				}
				period := periods[rng.IntN(len(periods))]
				lim, newModel, grid, _, err := draw(rng, capacity, cost, period)
				if err != nil {
					t.Fatal(err)
				}
				l := mustNew(t, store, fmt.Sprintf("model-%d", seed), lim)
				models := map[string]model{}
				now := base + rng.Int64N(int64(time.Hour))
				for i := range events {
					now += gap(rng, now, grid)
					now -= now % res
					key := "client-" + strconv.Itoa(rng.IntN(keys))
					n := int64(1)
					if rng.IntN(8) == 0 && 2*cost <= capacity {
						n = 2
					}
					m := models[key]
					if m == nil {
						m = newModel()
						models[key] = m
					}
					want := m.allow(now, n*cost)
					want.retry = time.Duration(ceilTo(int64(want.retry), res))
					want.next = time.Duration(ceilTo(int64(want.next), res))
					d, err := l.Allow(ctx, key, time.Unix(0, now), n)
					if err != nil {
						t.Fatalf("seed %d step %d: %v", seed, i, err)
					}
					got := result{d.Allowed, d.RetryAfter, d.Remaining, next(d, now)}
					if got != want {
						t.Fatalf("seed %d (%v) step %d: Allow(%s, t=%d, %d) = %+v, want %+v", seed, lim, i, key, now-base, n, got, want)
					}
				}
			}
		})
	}
}

// next returns d's Next, after checking draft-10's rule that a
// rejection's Retry-After is never shorter.
func next(d limiter.Decision, _ int64) time.Duration {
	if !d.Allowed && d.Next > d.RetryAfter {
		return -1 // never what a model says
	}
	return d.Next
}

// ceilTo rounds v ≥ 0 up to a multiple of res.
func ceilTo(v, res int64) int64 { return (v + res - 1) / res * res }

// gap returns the time to the next event: often nothing, often a little,
// sometimes exactly to the next edge of grid or one nanosecond either side
// of it, sometimes long enough for everything to reset.
func gap(rng *rand.Rand, now, grid int64) int64 {
	toEdge := grid - ((now%grid)+grid)%grid
	switch rng.IntN(10) {
	case 0, 1:
		return 0
	case 2:
		return toEdge
	case 3:
		return toEdge - 1 + rng.Int64N(3)
	case 4:
		return 3*grid + rng.Int64N(grid)
	case 5, 6:
		return rng.Int64N(grid/4 + 1)
	default:
		return rng.Int64N(grid + 1)
	}
}

// RunBoundary runs the window-edge scenario: a limit of 1000 per
// minute, 1000 requests at 0:59 and 1000 more at 1:01. The admitted counts
// follow from docs/algorithms.md (see the comments) and show each algorithm's burst at
// a window edge.
func RunBoundary(t *testing.T, newStore NewStore) {
	m := must(t)
	cases := []struct {
		lim  limiter.Limit
		want int
		why  string
	}{
		{m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1000, Window: time.Minute})), 2000,
			"1000 in window [0:00,1:00) and 1000 in [1:00,2:00)"},
		{m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 1000, Window: time.Minute})), 1000,
			"at 1:01 all 1000 of 0:59 are inside (0:01, 1:01]"},
		{m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1000, Per: time.Minute}, Burst: 1000})), 1033,
			"full burst at 0:59, then 2s × 1000/60s = 33.3 tokens at 1:01"},
		{m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1000, Window: time.Minute, Slots: 1})), 1016,
			"at 1:01 the previous window weighs 59/60 × 1000 = 983.3; 16 more fit"},
		{m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 1000, Window: time.Minute, Slots: 6})), 1000,
			"at 1:01 the slot [0:50,1:00) is wholly inside (0:01, 1:01]"},
	}
	store := newStore(t)
	ctx := context.Background()
	start := base + int64(59*time.Second)
	for i, c := range cases {
		l := mustNew(t, store, "boundary-"+strconv.Itoa(i), c.lim)
		admitted := 0
		for _, at := range []int64{start, start + int64(2*time.Second)} {
			for range 1000 {
				d, err := l.Allow(ctx, "k", time.Unix(0, at), 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
			}
		}
		t.Logf("%-55v admitted %4d of 2000 (%s)", c.lim, admitted, c.why)
		if admitted != c.want {
			t.Errorf("%v: admitted %d, want %d: %s", c.lim, admitted, c.want, c.why)
		}
	}
}

// RunMultiLimit checks docs/algorithms.md's rule for several limits: admitted only if
// every limit admits, and a rejected request consumes nothing from any.
func RunMultiLimit(t *testing.T, newStore NewStore) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	tb := m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 5}))
	fw := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 2, Window: time.Minute}))
	l := mustNew(t, store, "multi", tb, fw)
	now := time.Unix(0, base)
	allow := func(at time.Time) limiter.Decision {
		t.Helper()
		d, err := l.Allow(ctx, "k", at, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range 2 {
		if d := allow(now); !d.Allowed {
			t.Fatalf("request %d rejected: %+v", i, d)
		}
	}
	// Ten rejections by the window must not drain the bucket.
	for range 10 {
		d := allow(now)
		if d.Allowed || d.Index != 1 || d.RetryAfter != time.Minute {
			t.Fatalf("third request in the window: %+v, want rejected by limit 1 with Retry-After 1m", d)
		}
	}
	// Next window: the bucket still has 3 of its 5 tokens.
	later := now.Add(time.Minute)
	for i := range 2 {
		d := allow(later)
		if !d.Allowed {
			t.Fatalf("next window, request %d rejected: %+v", i, d)
		}
	}
	d := allow(later.Add(time.Minute))
	if !d.Allowed || d.Index != 0 || d.Remaining != 0 {
		t.Fatalf("fifth request overall: %+v, want admitted with the bucket (limit 0) at 0 remaining", d)
	}
	// The bucket is empty now; the window would admit, the bucket rejects,
	// and the window's count must not move.
	d = allow(later.Add(time.Minute))
	if d.Allowed || d.Index != 0 {
		t.Fatalf("sixth request: %+v, want rejected by limit 0", d)
	}
	only := mustNew(t, store, "multi", fw) // same policy name: same window state
	if d, _ := only.Allow(ctx, "k", later.Add(time.Minute), 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("window alone after the rejection: %+v, want one admission left", d)
	}
}

// RunConcurrent hammers one key from many goroutines at one instant: the
// admitted total must equal the limit exactly — no lost or double admits.
func RunConcurrent(t *testing.T, newStore NewStore) {
	const (
		workers = 8
		each    = 500
		limit   = 1234
	)
	m := must(t)
	now := time.Unix(0, base)
	for _, lim := range []limiter.Limit{
		m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: limit})),
		m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limit, Window: time.Hour})),
		m(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: limit, Window: time.Hour})),
		m(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: limit, Window: time.Hour, Slots: 4})),
	} {
		store := newStore(t)
		l := mustNew(t, store, "concurrent", lim)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					d, err := l.Allow(context.Background(), "hot", now, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != limit {
			t.Errorf("%v: %d goroutines × %d requests at one instant admitted %d, want exactly %d", lim, workers, each, got, limit)
		}
	}
}

// RunReload checks that state is keyed by names, not by Limiter values: a
// new Limiter for the same policy keeps the counters and applies its new
// parameters from its first request; a changed algorithm starts fresh.
func RunReload(t *testing.T, newStore NewStore) {
	m := must(t)
	store := newStore(t)
	ctx := context.Background()
	now := time.Unix(0, base)
	allow := func(l *limiter.Limiter) limiter.Decision {
		t.Helper()
		d, err := l.Allow(ctx, "k", now, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tb := func(burst int64) limiter.Limit {
		return m(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: burst}))
	}
	v1 := mustNew(t, store, "api", tb(10))
	for range 10 {
		allow(v1)
	}
	if d := allow(v1); d.Allowed {
		t.Fatal("drained bucket admitted")
	}
	// An unrelated change (same name, same algorithm, same numbers).
	if d := allow(mustNew(t, store, "api", tb(10))); d.Allowed {
		t.Fatal("reload with the same limit reset the bucket")
	}
	// A smaller burst clamps; a larger one does not refill.
	if d := allow(mustNew(t, store, "api", tb(20))); d.Allowed || d.Limit != 20 {
		t.Fatalf("raised burst: %+v, want still empty, limit 20", d)
	}
	// Another algorithm under the same policy name starts fresh.
	fw := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1, Window: time.Hour}))
	if d := allow(mustNew(t, store, "api", fw)); !d.Allowed {
		t.Fatalf("new algorithm: %+v, want a fresh limit", d)
	}
	// Raising a window's limit takes effect at once.
	fw5 := m(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Hour}))
	if d := allow(mustNew(t, store, "api", fw5)); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("raised window limit: %+v, want admitted with 3 left", d)
	}
	// Lowering a burst clamps the tokens: a fresh bucket of 10 used once
	// holds 9; with burst 4 it holds 4.
	v2 := mustNew(t, store, "web", tb(10))
	allow(v2)
	d := allow(mustNew(t, store, "web", tb(4)))
	if !d.Allowed || d.Remaining != 3 {
		t.Fatalf("lowered burst: %+v, want admitted with 3 of 4 left", d)
	}
}
