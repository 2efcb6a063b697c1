package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// outcome is one decision of a failover test's traffic.
type outcome struct {
	at       time.Time
	hot      bool // on the master that dies
	degraded bool
}

// run is a failover test's traffic.
type run struct {
	mu      sync.Mutex
	seen    []outcome
	lastHot time.Time // the last degraded decision on the hot key
	wg      sync.WaitGroup
	stop    chan struct{}
}

// settled reports whether the hot key has been decided on Redis alone
// for a second since the later of after and its last degraded decision.
func (r *run) settled(after time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(after) > time.Second && time.Since(r.lastHot) > time.Second
}

// end stops the traffic and returns what it saw.
func (r *run) end() []outcome {
	close(r.stop)
	r.wg.Wait()
	return r.seen
}

// traffic decides on the hot key and the cold ones from several
// goroutines until end is called.
func traffic(t *testing.T, l *limiter.Limiter, hot string, cold []string) *run {
	r := &run{stop: make(chan struct{})}
	mu, wg, stop := &r.mu, &r.wg, r.stop
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Seven goroutines on the hot key, one on the cold
				// ones: their failures come together, and a single
				// breaker would open.
				key, isHot := hot, true
				if g == 0 {
					key, isHot = cold[i%len(cold)], false
				}
				d, err := l.Allow(context.Background(), key, time.Now(), 1)
				if err != nil {
					t.Error(err)
					return
				}
				o := outcome{at: time.Now(), hot: isHot, degraded: d.Degraded}
				mu.Lock()
				r.seen = append(r.seen, o)
				if o.degraded && (o.hot || len(cold) == 1) {
					r.lastHot = o.at
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // about 1,500 decisions/s in all
			}
		})
	}
	return r
}

// failoverBound is how long after the replica reports itself master the
// limits on the dead master's keys may still be decided under on_error.
const failoverBound = 3 * time.Second

// judge checks a failover's outcomes: no cold key ever degraded, the hot
// key shared again within failoverBound of promoted. It logs the figures.
func judge(t *testing.T, seen []outcome, killed, promoted time.Time) {
	t.Helper()
	var lastDegraded time.Time
	var hotDegraded, coldDegraded, after int
	for _, o := range seen {
		switch {
		case o.degraded && !o.hot:
			coldDegraded++
		case o.degraded:
			hotDegraded++
			if o.at.After(lastDegraded) {
				lastDegraded = o.at
			}
		}
	}
	for _, o := range seen {
		if o.hot && !o.degraded && o.at.After(lastDegraded) {
			after++
		}
	}
	t.Logf("%d decisions; the replica reported master %v after the kill; the hot key degraded %d times, last %v after the promotion; %d shared decisions on it after that",
		len(seen), promoted.Sub(killed).Round(time.Millisecond), hotDegraded, lastDegraded.Sub(promoted).Round(time.Millisecond), after)
	if coldDegraded > 0 {
		t.Errorf("%d decisions on keys of healthy masters followed on_error", coldDegraded)
	}
	if lastDegraded.Sub(promoted) > failoverBound {
		t.Errorf("the dead master's key was decided under on_error %v after its replica reported master, above %v", lastDegraded.Sub(promoted).Round(time.Millisecond), failoverBound)
	}
	if after < 10 {
		t.Errorf("only %d shared decisions on the dead master's key after it degraded last", after)
	}
}

// waitFor polls cond every 20ms until it holds or limit passes, and
// returns when it held.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Now()
}

// failoverTimeout is the failover tests' Redis timeout. A master killed
// on loopback refuses connections at once (and resets those it had), so
// its failures do not wait for the timeout; the healthy masters must
// answer within it even on a machine at a load of tens of runnable
// threads per core, where a round trip may stall for hundreds of
// milliseconds: a decision on them that missed it would be taken for a
// healthy master's key decided under on_error.
const failoverTimeout = time.Second

// failoverLimiter is a limit none of the tests' traffic reaches, on a
// store that denies when it cannot reach Redis: a degraded decision shows.
func failoverLimiter(t *testing.T, c redis.UniversalClient) (*redisstore.Store, *limiter.Limiter) {
	s, err := redisstore.New(c, redisstore.Options{Timeout: failoverTimeout, OnError: "deny"})
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1_000_000, Window: time.Hour})
	l, _ := limiter.New(s, "failover", lim)
	return s, l
}

// TestClusterFailover kills (SIGKILL) a master of a Redis Cluster with
// replicas under traffic: keys on the two healthy masters are never
// decided under on_error (each master has its own breaker), /readyz's
// check names the dead master while it is down, and the dead master's
// keys are shared again within failoverBound of its replica reporting
// itself master (the slot map is read again on failures and every
// second, not once a minute).
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	// A node timeout of a second: the replica takes over about two
	// seconds after its master dies. The test's scripts are short.
	shards := redistest.ClusterReplicas(t, time.Second)
	var addrs []string
	for _, s := range shards {
		addrs = append(addrs, s.Master.Addr())
	}
	c := redisstore.NewClient(redisstore.ClientOptions{Addrs: addrs, Timeout: failoverTimeout})
	defer c.Close()
	s, l := failoverLimiter(t, c)
	victim := shards[0]
	var hot string
	var cold []string
	for i := 0; hot == "" || len(cold) < 20; i++ {
		key := fmt.Sprintf("client-%d", i)
		switch node := s.NodeOf(key); {
		case node == victim.Master.Addr():
			if hot == "" {
				hot = key
			}
		case node != "cluster":
			cold = append(cold, key)
		}
		if i > 10_000 {
			t.Fatal("no keys on the victim and others")
		}
	}
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("ready before the failover: %v", err)
	}
	r := traffic(t, l, hot, cold)
	time.Sleep(200 * time.Millisecond)
	victim.Master.Kill()
	killed := time.Now()
	waitFor(t, "the dead master's breaker opens", 5*time.Second, s.Degraded)
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), victim.Master.Addr()) {
		t.Errorf("ready with a master dead: %v, want an error naming %s", err, victim.Master.Addr())
	}
	open := false
	for _, n := range s.Nodes() {
		open = open || (n.Node == victim.Master.Addr() && n.Open)
	}
	if !open {
		t.Errorf("nodes %+v: the dead master's breaker is not reported open", s.Nodes())
	}
	promoted := waitFor(t, "the replica takes over", 20*time.Second, func() bool { return victim.Replica.Role() == "master" })
	waitFor(t, "shared for a second", failoverBound+2*time.Second, func() bool { return r.settled(promoted) })
	judge(t, r.end(), killed, promoted)
	if err := s.Ready(context.Background()); err != nil {
		t.Errorf("ready after the failover: %v", err)
	}
}

// TestSentinelFailover kills (SIGKILL) the master Sentinel watches under
// traffic: decisions are shared again within failoverBound of the
// Sentinels naming its replica master.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	g := redistest.SentinelReplicas(t)
	c := redisstore.NewClient(redisstore.ClientOptions{Addrs: g.Addrs, MasterName: g.Name, Timeout: failoverTimeout})
	defer c.Close()
	_, l := failoverLimiter(t, c)
	r := traffic(t, l, "hot", []string{"hot"})
	time.Sleep(200 * time.Millisecond)
	g.Master.Kill()
	killed := time.Now()
	promoted := waitFor(t, "the sentinels promote the replica", 20*time.Second, func() bool { return g.MasterAddr() == g.Replica.Addr() })
	waitFor(t, "shared for a second", failoverBound+2*time.Second, func() bool { return r.settled(promoted) })
	seen := r.end()
	for i := range seen {
		seen[i].hot = true // one master: every key is on it
	}
	judge(t, seen, killed, promoted)
}

// TestClientGone: a decision whose caller left (its context cancelled, a
// client that disconnected) is not a Redis failure: it is not counted in
// Errors and never opens the breaker, while Redis answers in time.
func TestClientGone(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	s, err := redisstore.New(c, redisstore.Options{Timeout: time.Second, OnError: "local", Fallback: memstore.New(memstore.Options{}), BreakAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1000, Window: time.Hour})
	l, _ := limiter.New(s, "gone", lim)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		if _, err := l.Allow(ctx, "client", time.Now(), 1); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	if s.Errors() != 0 || s.Degraded() {
		t.Errorf("50 decisions of clients gone: %d errors counted, breaker open %v; want none, closed (last error %v)", s.Errors(), s.Degraded(), s.LastError())
	}
}

// TestClusterOneAddress: a Redis Cluster node given as the one address is
// detected and named, rather than taken for a single node whose every
// MOVED is an outage; Ready says so too.
func TestClusterOneAddress(t *testing.T) {
	t.Parallel()
	addrs := redistest.SharedCluster(t)
	c := redisstore.NewClient(redisstore.ClientOptions{Addrs: addrs[:1], Timeout: time.Second})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Options{Timeout: time.Second, OnError: "deny", Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range []func(context.Context) error{s.Verify, s.Ready} {
		if err := check(context.Background()); !errors.Is(err, redisstore.ErrClusterNode) || !strings.Contains(err.Error(), addrs[0]) {
			t.Errorf("got %v, want ErrClusterNode naming %s", err, addrs[0])
		}
	}
	// A decision answered MOVED says why in the store's last error.
	lim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 10, Window: time.Hour})
	l, _ := limiter.New(s, "one", lim)
	for i := range 20 {
		l.Allow(context.Background(), fmt.Sprint("k", i), time.Now(), 1)
	}
	if err := s.LastError(); !errors.Is(err, redisstore.ErrClusterNode) {
		t.Errorf("last error %v, want one wrapping ErrClusterNode", err)
	}
}
