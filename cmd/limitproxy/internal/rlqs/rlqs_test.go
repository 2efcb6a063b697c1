package rlqs

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

const testPolicies = `
[[policy]]
name = "login"
match = { rls_domain = "d", descriptor = ["path=/login", "ip"] }
key = ["descriptor:ip"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 100
  window = "10s"

[[policy]]
name = "free"
match = { rls_domain = "d", descriptor = ["tier=free"] }
unlimited = true

[[policy]]
name = "open"
match = { rls_domain = "d", descriptor = ["open"] }

[[policy]]
name = "queue"
match = { rls_domain = "d", descriptor = ["queue"] }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "10/s"
`

// fixture is a Service over policies on the memory store, with a clock
// the test sets.
type fixture struct {
	svc *Service
	h   *proxy.Handler
	mem *memstore.Store
	mu  sync.Mutex
	now time.Time
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

func compile(t testing.TB, mem *memstore.Store, src string) *policy.Set {
	t.Helper()
	cfg, err := config.Parse("rlqs.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, mem, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func newFixture(t testing.TB, src string, c config.RLQS, now func() time.Time) *fixture {
	t.Helper()
	f := &fixture{mem: memstore.New(memstore.Options{}), now: time.Unix(1_700_000_000, 0)}
	f.h = proxy.New(compile(t, f.mem, src), proxy.Options{Metrics: proxy.NewMetrics(prometheus.NewRegistry())})
	if now == nil {
		now = f.clock
	}
	svc, err := NewService(Options{Handler: f.h, Leases: leases.New(f.mem, leases.Options{}), Config: c, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	return f
}

// report is one bucket's usage.
func report(domain string, id map[string]string, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports {
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: id}, TimeElapsed: durationpb.New(time.Second),
		NumRequestsAllowed: allowed, NumRequestsDenied: denied,
	}}}
}

// one answers r on st and returns its one action's strategy and TTL.
func one(t *testing.T, f *fixture, st *stream, r *rlqsv3.RateLimitQuotaUsageReports) (*typev3.RateLimitStrategy, time.Duration) {
	t.Helper()
	resp, err := f.svc.answer(context.Background(), st, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BucketAction) != 1 {
		t.Fatalf("%d actions, want 1", len(resp.BucketAction))
	}
	a := resp.BucketAction[0]
	return a.GetQuotaAssignmentAction().GetRateLimitStrategy(), a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration()
}

func isBlanket(s *typev3.RateLimitStrategy, r typev3.RateLimitStrategy_BlanketRule) bool {
	_, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok && s.GetBlanketRule() == r
}

// TestAssignments: buckets to policies, and the assignments' arithmetic.
func TestAssignments(t *testing.T) {
	f := newFixture(t, testPolicies, config.RLQS{AssignmentTTL: 4 * time.Second, MaxShare: 0.1}, nil)
	st := &stream{buckets: map[string]*bucket{}}
	// Blanket rules.
	for _, c := range []struct {
		name string
		id   map[string]string
		rule typev3.RateLimitStrategy_BlanketRule
	}{
		{"unmatched", map[string]string{"path": "/other", "ip": "1"}, typev3.RateLimitStrategy_ALLOW_ALL},
		{"unlimited", map[string]string{"tier": "free"}, typev3.RateLimitStrategy_ALLOW_ALL},
		{"no limits", map[string]string{"open": "x"}, typev3.RateLimitStrategy_ALLOW_ALL},
		{"leaky bucket", map[string]string{"queue": "x"}, typev3.RateLimitStrategy_DENY_ALL},
	} {
		s, ttl := one(t, f, st, report("d", c.id, 1, 0))
		if !isBlanket(s, c.rule) || ttl != 4*time.Second {
			t.Errorf("%s: %v ttl %v, want %v for 4s", c.name, s, ttl, c.rule)
		}
	}
	// Token buckets: the demand, capped at max_share (10 of 100), for the
	// TTL, refilling less than a token within it; each differs from the
	// last. The entries' order does not matter (a map); the key is ip.
	id := map[string]string{"ip": "203.0.113.7", "path": "/login"}
	var last *typev3.TokenBucket
	for i, c := range []struct {
		demand uint64
		want   uint32
	}{{1, 1}, {3, 3}, {50, 10}, {50, 10}} {
		s, ttl := one(t, f, st, report("d", id, c.demand, 0))
		tb := s.GetTokenBucket()
		if tb == nil || tb.MaxTokens != c.want || tb.TokensPerFill.GetValue() != 1 || ttl != 4*time.Second || tb.FillInterval.Seconds != 5 {
			t.Fatalf("report %d: %v ttl %v, want %d tokens, 1 per 5s, for 4s", i, s, ttl, c.want)
		}
		if last != nil && sameTokens(tb, last) {
			t.Errorf("report %d: the same token bucket as the last: Envoy would keep the old one", i)
		}
		last = tb
	}
	// 24 units leased of 100; the rest in 8 leases of 10, then DENY_ALL
	// until the window's end (at 1_700_000_000 + 10 s: the TTL covers
	// it); another key is its own.
	for range 7 {
		one(t, f, st, report("d", id, 50, 0))
	}
	s, _ := one(t, f, st, report("d", id, 50, 0))
	if tb := s.GetTokenBucket(); tb == nil || tb.MaxTokens != 6 {
		t.Fatalf("the window's last units: %v, want a token bucket of 6", s)
	}
	s, ttl := one(t, f, st, report("d", id, 50, 0))
	if !isBlanket(s, typev3.RateLimitStrategy_DENY_ALL) || ttl < 4*time.Second {
		t.Fatalf("exhausted: %v for %v, want DENY_ALL for at least 4s", s, ttl)
	}
	s, _ = one(t, f, st, report("d", map[string]string{"ip": "other", "path": "/login"}, 50, 0))
	if s.GetTokenBucket().GetMaxTokens() != 10 {
		t.Fatalf("another key: %v, want 10 tokens", s)
	}
	// The next window: a lease again, whose TTL ends with the window
	// (whole seconds).
	f.set(time.Unix(1_700_000_010, 0).Add(7500 * time.Millisecond))
	s, ttl = one(t, f, st, report("d", id, 50, 0))
	if s.GetTokenBucket().GetMaxTokens() != 10 || ttl != 2*time.Second || s.GetTokenBucket().GetFillInterval().GetSeconds() != 3 {
		t.Fatalf("next window, 2.5s before its end: %v for %v, want 10 tokens for 2s, 1 per 3s", s, ttl)
	}
	// Less than a second of the window left: DENY_ALL.
	f.set(time.Unix(1_700_000_019, 500_000_000))
	if s, _ = one(t, f, st, report("d", id, 50, 0)); !isBlanket(s, typev3.RateLimitStrategy_DENY_ALL) {
		t.Fatalf("0.5s before the window's end: %v, want DENY_ALL", s)
	}
	// Bounds: an empty domain is refused; max_buckets.
	if _, err := f.svc.answer(context.Background(), st, report("", id, 1, 0)); err == nil {
		t.Error("an empty domain was answered")
	}
	f.svc.cfg.MaxBuckets = len(st.buckets)
	if _, err := f.svc.answer(context.Background(), st, report("d", map[string]string{"ip": "new", "path": "/login"}, 1, 0)); err == nil {
		t.Error("a bucket beyond max_buckets was answered")
	}
	stats := f.svc.Stats()
	if stats.Assignments[TokenBucket] == 0 || stats.Assignments[Denied] == 0 || stats.Assignments[Unmatched] != 1 || stats.Assignments[Unlimited] != 2 || stats.Assignments[Unsupported] != 1 {
		t.Errorf("stats %+v", stats)
	}
}

// TestReload: a reload's policies decide the next report's assignment.
func TestReload(t *testing.T) {
	f := newFixture(t, testPolicies, config.RLQS{AssignmentTTL: 4 * time.Second, MaxShare: 0.1}, nil)
	st := &stream{buckets: map[string]*bucket{}}
	id := map[string]string{"ip": "1", "path": "/login"}
	if s, _ := one(t, f, st, report("d", id, 50, 0)); s.GetTokenBucket().GetMaxTokens() != 10 {
		t.Fatalf("before: %v, want 10 tokens", s)
	}
	raised := compile(t, f.mem, `
[[policy]]
name = "login"
match = { rls_domain = "d", descriptor = ["path=/login", "ip"] }
key = ["descriptor:ip"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 300
  window = "10s"
`)
	if err := f.h.Swap(raised); err != nil {
		t.Fatal(err)
	}
	if s, _ := one(t, f, st, report("d", id, 50, 0)); s.GetTokenBucket().GetMaxTokens() != 30 {
		t.Fatalf("limit raised to 300: %v, want 30 tokens", s)
	}
	if err := f.h.Swap(compile(t, f.mem, `
[[policy]]
name = "login"
match = { rls_domain = "d", descriptor = ["path=/login", "ip"] }
unlimited = true
`)); err != nil {
		t.Fatal(err)
	}
	if s, _ := one(t, f, st, report("d", id, 50, 0)); !isBlanket(s, typev3.RateLimitStrategy_ALLOW_ALL) {
		t.Fatalf("unlimited: %v, want ALLOW_ALL", s)
	}
}

// TestEnvoysWithinBound is the black-box test: Envoys modelled on Envoy's
// filter (envoy_test.go), over real gRPC to a real listener on loopback,
// each with a Poisson demand above its share, reporting every second, on
// a fixed window and on a sliding log; what they admit in aggregate in
// every window stays within the documented bound, and above a floor.
func TestEnvoysWithinBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 10 s")
	}
	const (
		envoys   = 6
		limit    = 300
		window   = 3 * time.Second
		share    = 0.1 // MaxLease 30
		rate     = 60.0
		interval = time.Second
		run      = 10 * time.Second
	)
	f := newFixture(t, `
[[policy]]
name = "fixed"
match = { rls_domain = "fixed", descriptor = ["route"] }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 300
  window = "3s"

[[policy]]
name = "sliding"
match = { rls_domain = "sliding", descriptor = ["route"] }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 300
  window = "3s"

[[policy]]
name = "open"
match = { rls_domain = "sliding", descriptor = ["open"] }
`, config.RLQS{AssignmentTTL: 2 * time.Second, MaxShare: share}, time.Now)
	srv, err := New(f.svc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(srv, ln)
	defer srv.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	var all []*envoy
	var wg sync.WaitGroup
	start := time.Now()
	for _, domain := range []string{"fixed", "sliding"} {
		for i := range envoys {
			e := dialEnvoy(ctx, t, cc, domain, interval, deny)
			all = append(all, e)
			wg.Go(func() { e.run(ctx, t, map[string]string{"route": "api"}, rate, rand.New(rand.NewPCG(uint64(i), 7))) })
		}
	}
	// An open bucket: ALLOW_ALL, every request admitted once assigned.
	open := dialEnvoy(ctx, t, cc, "sliding", interval, deny)
	wg.Go(func() { open.run(ctx, t, map[string]string{"open": "x"}, 20, rand.New(rand.NewPCG(99, 7))) })
	wg.Wait()
	end := time.Now()
	var fixed, sliding []time.Time
	for i, e := range all {
		e.mu.Lock()
		if i < envoys {
			fixed = append(fixed, e.admitted...)
		} else {
			sliding = append(sliding, e.admitted...)
		}
		e.mu.Unlock()
	}
	bound := float64(limit) * (1 + envoys*share) // N × MaxLease beyond the limit
	// Fixed window: per window of the epoch's grid; the whole windows
	// inside the run must admit at least half the limit.
	perWindow := map[int64]int{}
	for _, at := range fixed {
		perWindow[at.UnixNano()/int64(window)]++
	}
	first, last := start.UnixNano()/int64(window)+1, end.UnixNano()/int64(window)-1
	for w, n := range perWindow {
		if float64(n) > bound {
			t.Errorf("fixed window %d admitted %d, above the bound %.0f", w, n, bound)
		}
		if n > limit {
			t.Logf("fixed window %d admitted %d: above the limit (delivery latency at its end)", w, n)
		}
	}
	for w := first; w <= last; w++ {
		t.Logf("fixed window %d: %d admitted of %d (demand %d)", w, perWindow[w], limit, int(envoys*rate*window.Seconds()))
		if perWindow[w] < limit/2 {
			t.Errorf("fixed window %d admitted %d, below half the limit", w, perWindow[w])
		}
	}
	// Sliding log: every window of 3 s, sampled each 50 ms.
	most, least := 0, 1<<30
	for at := start; !at.Add(window).After(end); at = at.Add(50 * time.Millisecond) {
		n := 0
		for _, a := range sliding {
			if !a.Before(at) && a.Before(at.Add(window)) {
				n++
			}
		}
		most = max(most, n)
		if at.After(start.Add(2 * time.Second)) {
			least = min(least, n)
		}
	}
	t.Logf("sliding log: at most %d, at least %d admitted in a window of %v (limit %d, bound %.0f)", most, least, window, limit, bound)
	if float64(most) > bound {
		t.Errorf("sliding log: %d admitted in one window, above the bound %.0f", most, bound)
	}
	if least < limit/2 {
		t.Errorf("sliding log: %d admitted in one window, below half the limit", least)
	}
	st := f.svc.Stats()
	t.Logf("assignments: %v token buckets (%d units), %v DENY_ALL, %v ALLOW_ALL", st.Assignments[TokenBucket], st.LeasedUnits, st.Assignments[Denied], st.Assignments[Unlimited])
	if st.Assignments[Denied] == 0 || st.Assignments[Unlimited] == 0 {
		t.Errorf("no DENY_ALL or no ALLOW_ALL: %+v", st)
	}
	open.mu.Lock()
	t.Logf("open bucket: %d admitted", len(open.admitted))
	if len(open.admitted) < 100 {
		t.Errorf("open bucket: %d admitted, want ALLOW_ALL's ~200", len(open.admitted))
	}
	open.mu.Unlock()
}
