package redisstore_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// TestMain runs up to 16 tests at once unless -parallel says otherwise:
// most of them wait on Redis, on timers or on a failover rather than use
// a CPU, and go test's default (GOMAXPROCS) would run them two by two.
// The cluster the tests share starts while the tests that cannot run in
// parallel (AllocsPerRun, goroutine counts) run first; it is stopped once
// every test is done.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "16")
	}
	redistest.StartShared()
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

// startRedis starts a server of the test's own and returns a client of it.
func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

func newStore(t testing.TB, c redis.UniversalClient, o redisstore.Options) *redisstore.Store {
	t.Helper()
	if o.OnError == "" {
		o.OnError = "deny" // a test must see Redis fail, not a fallback
	}
	s, err := redisstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	if tb, ok := t.(*testing.T); ok {
		tb.Cleanup(func() {
			if err := s.LastError(); err != nil && o.OnError == "deny" {
				tb.Errorf("a decision failed on Redis: %v", err)
			}
		})
	}
	return s
}

// TestConformance holds the Redis store to the memory store's suite, with
// the caller's instants (at the store's resolution of one microsecond).
// Each subtest's store has a key prefix of its own, so that the suite's
// parts, and the model traces, run in parallel; with a round trip per decision they run fewer
// seeds than the memory store's (4 of 12: 10,000 decisions an algorithm).
func TestConformance(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	conformance(t, func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second, Prefix: redistest.Prefix(t)})
	}, limitertest.Options{Resolution: time.Microsecond, Seeds: 4, Parallel: true}, true)
}

// conformance runs the parts of limitertest.RunWith (keep the list in
// step with it) as parallel subtests, where RunWith runs them one after
// the other: the Redis store's decisions wait on round trips, and the
// suite then takes about as long as its longest part (Charge). mk must
// give each subtest a key prefix of its own. With keys false, Keys
// checks that the store refuses a decision under several client keys
// (ErrClusterKeys), and skips the rest: on Redis Cluster a policy's
// limits must share one client key, whose slot holds them all.
func conformance(t *testing.T, mk limitertest.NewStore, o limitertest.Options, keys bool) {
	for _, part := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Model", func(t *testing.T) { limitertest.RunModel(t, mk, o) }},
		{"Boundary", func(t *testing.T) { limitertest.RunBoundary(t, mk) }},
		{"MultiLimit", func(t *testing.T) { limitertest.RunMultiLimit(t, mk) }},
		{"Concurrent", func(t *testing.T) { limitertest.RunConcurrent(t, mk) }},
		{"Reload", func(t *testing.T) { limitertest.RunReload(t, mk) }},
		{"PeekReset", func(t *testing.T) { limitertest.RunPeekReset(t, mk) }},
		{"Keys", func(t *testing.T) {
			if keys {
				limitertest.RunKeys(t, mk)
				return
			}
			fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 3, Window: time.Hour})
			l, _ := limiter.New(mk(t), "keys", fw, fw)
			if _, err := l.AllowKeys(context.Background(), []string{"ip1", "key0"}, time.Now(), 1); !errors.Is(err, redisstore.ErrClusterKeys) {
				t.Fatalf("a decision under two client keys on Cluster: %v, want ErrClusterKeys", err)
			}
			t.Skip("refused by design on Cluster (ErrClusterKeys): the keys of one decision must share a slot, and two client keys need not")
		}},
		{"Shared", func(t *testing.T) { limitertest.RunShared(t, mk) }},
		{"Charge", func(t *testing.T) { limitertest.RunCharge(t, mk, o) }},
		{"Calendar", func(t *testing.T) { limitertest.RunCalendar(t, mk, o) }},
	} {
		t.Run(part.name, func(t *testing.T) {
			t.Parallel()
			part.run(t)
		})
	}
}

// TestLeakyVirtual: the virtual queue decides as the real one does when
// nobody leaves it.
func TestLeakyVirtual(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	limitertest.RunLeakyVirtual(t, func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	}, limitertest.Options{Resolution: time.Microsecond})
}

// outageTimeout is the Redis timeout of the outage tests. It is not what
// they measure: with redis-server killed its port refuses connections at
// once, and a decision that waited for the timeout would show. It is a
// second so that, on a machine at a load of tens of runnable threads per
// core, a decision before the outage does not miss it.
const outageTimeout = time.Second

// TestOutage kills redis-server under a store, then starts it again, for
// each on_error: decisions follow it, none waits (a refused connection
// fails at once), the breaker opens (from then on answers are immediate) and
// closes by itself once Redis is back, and the limit is enforced again.
func TestOutage(t *testing.T) {
	t.Parallel()
	lim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Hour})
	for _, mode := range []string{"local", "allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			// The product's client: no retries, one dial an attempt.
			c := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, Timeout: outageTimeout})
			defer c.Close()
			var events []bool
			var mu sync.Mutex
			store, err := redisstore.New(c, redisstore.Options{Timeout: outageTimeout, OnError: mode, Fallback: memstore.New(memstore.Options{}),
				BreakAfter: 3, BreakFor: 300 * time.Millisecond, OnBreaker: func(_ string, open bool, err error) {
					mu.Lock()
					events = append(events, open)
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			l, _ := limiter.New(store, "outage", lim)
			ctx := context.Background()
			allow := func(key string) (limiter.Decision, time.Duration) {
				begin := time.Now()
				d, err := l.Allow(ctx, key, time.Now(), 1)
				if err != nil {
					t.Fatalf("Allow returned %v; on_error must answer instead", err)
				}
				return d, time.Since(begin)
			}
			for i := range 6 {
				if d, _ := allow("a"); d.Allowed != (i < 5) {
					t.Fatalf("before the outage, request %d: %+v", i, d)
				}
			}

			srv.Kill()
			for i := range 10 {
				d, took := allow("b")
				// None waits: a refused connection fails at once, and
				// from the fourth on the breaker keeps them from Redis
				// (the count of errors below shows it).
				if took > 200*time.Millisecond {
					t.Errorf("decision %d during the outage took %v, above 200ms: a refused connection must fail at once", i, took)
				}
				switch mode {
				case "local": // the instance's own limit: 5
					if d.Allowed != (i < 5) {
						t.Errorf("local, request %d: %+v", i, d)
					}
				case "allow":
					if !d.Allowed {
						t.Errorf("allow, request %d rejected", i)
					}
				case "deny":
					if d.Allowed || d.RetryAfter < time.Second {
						t.Errorf("deny, request %d: %+v", i, d)
					}
				}
			}
			if store.Errors() != 3 || !store.Degraded() {
				t.Errorf("errors %d, degraded %v: want 3 failures, then the breaker open (no call to Redis)", store.Errors(), store.Degraded())
			}

			srv.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for store.Degraded() {
				if time.Now().After(deadline) {
					t.Fatal("the breaker did not close within 10s of Redis coming back")
				}
				allow("probe")
				time.Sleep(20 * time.Millisecond)
			}
			for i := range 6 {
				if d, _ := allow("c"); d.Allowed != (i < 5) {
					t.Fatalf("after recovery, request %d: %+v", i, d)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(events) != 2 || !events[0] || events[1] {
				t.Errorf("breaker events %v, want [open close]", events)
			}
		})
	}
}

// TestTTL: with Redis's own clock, a key expires when its state would be a
// fresh key's, so idle clients cost nothing.
func TestTTL(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	store := newStore(t, c, redisstore.Options{Timeout: 5 * time.Second})
	// One token back in a second: the key's TTL is read well within it,
	// even on a loaded machine.
	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 10})
	l, _ := limiter.New(store, "ttl", lim)
	ctx := context.Background()
	if d, err := l.Allow(ctx, "client", time.Now(), 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	keys, _ := c.Keys(ctx, "*").Result()
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	pttl, _ := c.PTTL(ctx, keys[0]).Result()
	if pttl <= 0 || pttl > time.Second {
		t.Errorf("TTL %v; one token of 1/s is back within a second", pttl)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(ctx, keys[0]).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("the key outlived its state")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCluster: on a Redis Cluster of three masters, a policy with several
// limits works (its keys share a slot through the hash tag), and many
// goroutines on one key admit exactly the limit.
func TestCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.SharedCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	newCluster := func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second, Prefix: redistest.Prefix(t)})
	}
	t.Run("MultiLimit", func(t *testing.T) { limitertest.RunMultiLimit(t, newCluster) })
	t.Run("Concurrent", func(t *testing.T) { limitertest.RunConcurrent(t, newCluster) })
	// The keys of many clients spread over the three masters.
	store := newCluster(t)
	lim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Hour})
	l, _ := limiter.New(store, "spread", lim)
	for i := range 300 {
		if _, err := l.Allow(context.Background(), "client-"+string(rune('a'+i%26))+string(rune('a'+i/26)), time.Now(), 1); err != nil {
			t.Fatal(err)
		}
	}
	used := 0
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		// The cluster is shared: count this test's keys alone.
		if n.Scan(context.Background(), 0, "lp:"+t.Name()+":*", 1000).Iterator().Next(context.Background()) {
			used++
		}
		n.Close()
	}
	if used != 3 {
		t.Errorf("keys of 300 clients landed on %d of 3 masters", used)
	}
}

// TestClockSkew: three instances whose clocks are 5s apart share limits
// exactly, because the script reads Redis's TIME, not theirs; and the
// reset they report is relative to their own clock.
func TestClockSkew(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	ctx := context.Background()
	skews := []time.Duration{-5 * time.Second, 0, 5 * time.Second}
	// At 1/s, trusting the callers' clocks would credit the 10s between
	// the slowest and the fastest instance: up to 10 tokens too many.
	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}, Burst: 30})
	begin := time.Now()
	var ls []*limiter.Limiter
	for range skews {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		l, _ := limiter.New(newStore(t, c, redisstore.Options{Timeout: 5 * time.Second}), "skew", lim)
		ls = append(ls, l)
	}
	var admitted int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			for range 40 {
				now := time.Now().Add(skews[i])
				d, err := l.Allow(ctx, "client", now, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if reset := d.ResetAt.Sub(now); reset < 0 || reset > 31*time.Second {
					t.Errorf("instance %d: reset %v from its own clock", i, reset)
				}
				if d.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	// The burst, plus what the bucket really earned while the test ran.
	if earned := int(time.Since(begin) / time.Second); admitted < 30 || admitted > 30+earned {
		t.Errorf("instances 10s apart admitted %d together in %v, want the burst of 30 (+%d earned)", admitted, time.Since(begin), earned)
	}
}

// TestSentinel: through Sentinel (master_name), the store finds the master
// and decides there.
func TestSentinel(t *testing.T) {
	t.Parallel()
	sentinel, master := redistest.Sentinel(t)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{sentinel}, MasterName: master})
	defer c.Close()
	limitertest.RunMultiLimit(t, func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	})
}

// TestBatches: concurrent decisions share script calls (batch.go). Mixed
// in one batch, single-limit and two-limit decisions and peeks (which
// consume nothing) must each get their own reply: every client is
// admitted exactly what its limits allow, and each peek reports what
// its client had left at that moment.
func TestBatches(t *testing.T) {
	t.Parallel()
	checkBatches(t, newStore(t, startRedis(t), redisstore.Options{Timeout: 5 * time.Second}))
}

// TestBatchesCluster: on Redis Cluster too, concurrent decisions share
// script calls (one a master, whatever their slots), each decided exactly.
func TestBatchesCluster(t *testing.T) {
	t.Parallel()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.SharedCluster(t)})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, redisstore.Options{Timeout: 5 * time.Second, Prefix: redistest.Prefix(t)})
	checkBatches(t, s)
	calls, decisions, _ := s.ScriptCalls()
	t.Logf("%d decisions in %d script calls", decisions, calls)
	if float64(decisions)/float64(calls) < 1.5 {
		t.Errorf("%d decisions in %d script calls: not batched", decisions, calls)
	}
}

func checkBatches(t *testing.T, s *redisstore.Store) {
	fw := func(limit int64) limiter.Limit {
		l, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limit, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tb, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 7})
	if err != nil {
		t.Fatal(err)
	}
	one, _ := limiter.New(s, "one", fw(10))
	two, _ := limiter.New(s, "two", fw(5), tb)
	const clients, goroutines, each = 8, 64, 20
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				key := "client-" + string(rune('a'+(g+i)%clients))
				l, name := one, "one"
				if g%2 == 1 {
					l, name = two, "two"
				}
				if i%3 == 2 {
					d, err := l.Peek(ctx, key, time.Now())
					if err != nil || d.Remaining < 0 || d.Limit != map[string]int64{"one": 10, "two": 5}[name] {
						t.Errorf("peek %s %s: %+v, %v", name, key, d, err)
					}
					continue
				}
				d, err := l.Allow(ctx, key, time.Now(), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[name+"/"+key]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for i := range clients {
		key := "client-" + string(rune('a'+i))
		if got := admitted["one/"+key]; got != 10 {
			t.Errorf("one/%s: admitted %d, want 10", key, got)
		}
		if got := admitted["two/"+key]; got != 5 {
			t.Errorf("two/%s: admitted %d, want 5 (the window's 5, below the bucket's 7)", key, got)
		}
		for name, l := range map[string]*limiter.Limiter{"one": one, "two": two} {
			if d, err := l.Peek(ctx, key, time.Now()); err != nil || d.Remaining != 0 || d.Allowed {
				t.Errorf("%s/%s after the run: %+v, %v; want nothing left", name, key, d, err)
			}
		}
	}
}

// TestSlots holds the Redis store's concurrency-limit slots to the
// conformance suite's.
func TestSlots(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	limitertest.RunSlots(t, func(t *testing.T) limiter.Store {
		return newStore(t, c, redisstore.Options{Timeout: 5 * time.Second, Prefix: redistest.Prefix(t)})
	})
}

// TestSlotLeases: a slot whose holder stops renewing it (an instance that
// crashed) frees itself when its lease ends; one whose holder lives is
// renewed past its lease and stays held.
func TestSlotLeases(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	ctx := context.Background()
	// Renewed every third of it, a lease survives a renewal late by up
	// to two thirds: a second, for a machine at a load of tens of
	// runnable threads per core.
	lease := 1500 * time.Millisecond
	// An instance that takes the one slot of k0 and then crashes: its
	// client is closed, so its slot is never renewed nor given back.
	cc := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
	crashed := newStore(t, cc, redisstore.Options{Timeout: 5 * time.Second, Prefix: "lease:", Lease: lease, OnError: "allow"})
	live := newStore(t, c, redisstore.Options{Timeout: 5 * time.Second, Prefix: "lease:", Lease: lease})
	other := newStore(t, c, redisstore.Options{Timeout: 5 * time.Second, Prefix: "lease:", Lease: lease})
	begin := time.Now()
	if _, ok, err := crashed.Take(ctx, "n", "k0", 1, time.Now()); err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	cc.Close()
	// Meanwhile a live instance holds the slot of k1.
	held, ok, err := live.Take(ctx, "n", "k1", 1, time.Now())
	if err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	if _, ok, _ := other.Take(ctx, "n", "k0", 1, time.Now()); ok {
		t.Fatal("a slot held was taken again at once")
	}
	// Free once its lease ends (on Redis's clock, in whole ms: 2ms of
	// tolerance), not before, and not much after: within the lease, plus
	// 10s for a loaded machine.
	for {
		if s, ok, _ := other.Take(ctx, "n", "k0", 1, time.Now()); ok {
			other.Give(s)
			break
		}
		if time.Since(begin) > lease+10*time.Second {
			t.Fatal("a crashed instance's slot was still held 10s after its lease")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if freed := time.Since(begin); freed < lease-2*time.Millisecond {
		t.Fatalf("a crashed instance's slot was free %v after it was taken, before its lease of %v ended", freed, lease)
	}
	if _, ok, err := other.Take(ctx, "n", "k2", 1, time.Now()); err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	time.Sleep(time.Until(begin.Add(3 * lease))) // k1 renewed meanwhile, every lease/3
	if _, ok, _ := other.Take(ctx, "n", "k1", 1, time.Now()); ok {
		t.Fatal("a live instance's slot was taken after its lease: not renewed")
	}
	live.Give(held)
	if s, ok, _ := other.Take(ctx, "n", "k1", 1, time.Now()); !ok {
		t.Fatal("a slot given back was not free")
	} else {
		other.Give(s)
	}
	if n := live.LeasesLost(); n != 0 {
		t.Fatalf("%d leases lost", n)
	}
}
