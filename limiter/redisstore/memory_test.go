package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// pressureJunk bounds the junk keys a memory-pressure test sends: with
// maxmemory about pressureRoom above what Redis uses at the start (a few
// thousand keys of ~150 bytes), Redis is full well before.
const (
	pressureJunk = 20_000
	pressureRoom = 256 << 10
	// pressureSlack is how far under its used memory a full Redis's
	// maxmemory is set (noeviction), past the few KiB its clients'
	// buffers move it by.
	pressureSlack = 64 << 10
)

// pressure is one memory-pressure case: a real redis-server with the given
// maxmemory-policy, a store answering on_error, a victim that spends its
// key (a token bucket with a burst of 10, 10 a day) before the flood.
type pressure struct {
	t      *testing.T
	c      redis.UniversalClient
	store  *redisstore.Store
	l      *limiter.Limiter
	victim string // the victim's Redis key
}

func newPressure(t *testing.T, policy, onError string) *pressure {
	t.Helper()
	srv := redistest.Start(t, "--maxmemory-policy", policy)
	c := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	store, err := redisstore.New(c, redisstore.Options{Timeout: 2 * time.Second, OnError: onError,
		Fallback: memstore.New(memstore.Options{}), BreakAfter: 3, BreakFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 10, Per: 24 * time.Hour}, Burst: 10})
	l, _ := limiter.New(store, "p", lim)
	p := &pressure{t: t, c: c, store: store, l: l}
	ctx := context.Background()
	for i := range 10 {
		if d, err := l.Allow(ctx, "user=me", time.Now(), 1); err != nil || !d.Allowed {
			t.Fatalf("request %d of the victim: %+v %v", i+1, d, err)
		}
	}
	if d, _ := l.Allow(ctx, "user=me", time.Now(), 1); d.Allowed {
		t.Fatalf("11th request of the victim allowed: %+v", d)
	}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys after the victim's requests: %v %v", keys, err)
	}
	p.victim = keys[0]
	used := p.info("used_memory")
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+pressureRoom, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

// info returns an integer field of INFO.
func (p *pressure) info(name string) int64 {
	p.t.Helper()
	s, err := p.c.Info(context.Background()).Result()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				p.t.Fatal(err)
			}
			return n
		}
	}
	p.t.Fatalf("INFO has no %s", name)
	return 0
}

// flood sends one request of cost 10 under each new junk key, one after
// the other, until stop says so (at most pressureJunk keys), and returns
// how many it sent.
func (p *pressure) flood(stop func() bool) int {
	p.t.Helper()
	ctx := context.Background()
	for i := range pressureJunk {
		if _, err := p.l.Allow(ctx, "junk-"+strconv.Itoa(i), time.Now(), 10); err != nil {
			p.t.Fatal(err)
		}
		if stop() {
			return i + 1
		}
	}
	p.t.Fatalf("Redis still not full after %d junk keys (errors %d, evicted keys %d)", pressureJunk, p.store.Errors(), p.info("evicted_keys"))
	return 0
}

// TestMemoryPressure pins what a real redis-server does to a spent key
// when a flood of new keys fills its maxmemory (docs/redis.md, "Memory
// pressure"). The victim spends its token bucket (burst 10); Redis gets
// maxmemory 256 KiB above what it uses; junk keys, each spent by one
// request of cost 10, follow until Redis is full. Then the victim asks
// again:
//
//   - noeviction (Redis's default): Redis refuses the script's writes
//     (OOM), the victim's decision included (a refusal writes its key
//     too), so on_error answers it: "deny" refuses it, as every decision
//     until keys expire; "local" decides it on this instance's memory
//     store, where the key is fresh: allowed, the limit given back;
//     "allow" admits it.
//   - allkeys-lru: Redis evicts the least recently used keys, the
//     victim's first (it was idle through the flood), without an error:
//     its next request finds no key and is allowed, with 9 left, whatever
//     on_error says.
func TestMemoryPressure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy, onError string
		allowed         bool
	}{
		{"noeviction", "deny", false},
		{"noeviction", "local", true},
		{"noeviction", "allow", true},
		{"allkeys-lru", "deny", true},
	} {
		t.Run(tc.policy+"/"+tc.onError, func(t *testing.T) {
			t.Parallel()
			p := newPressure(t, tc.policy, tc.onError)
			ctx := context.Background()
			evicting := tc.policy != "noeviction"
			n := p.flood(func() bool {
				if evicting {
					return p.c.Exists(ctx, p.victim).Val() == 0
				}
				return p.store.Errors() > 0
			})
			if !evicting {
				// Full: a write was refused. Redis's used memory moves by
				// a few KiB with its clients' buffers, so the next write
				// may fit again (the victim's did, once in a fresh-clone
				// make test); maxmemory is set a little under what is
				// used, so that Redis stays full for the rest of the test.
				if err := p.c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(p.info("used_memory")-pressureSlack, 10)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			d, err := p.l.Allow(ctx, "user=me", time.Now(), 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after %d junk keys (evicted keys %d, errors %d): the victim %+v", n, p.info("evicted_keys"), p.store.Errors(), d)
			if d.Allowed != tc.allowed || d.Degraded == evicting {
				t.Fatalf("the victim's request after Redis filled up: allowed %v, degraded %v; want allowed %v, degraded %v",
					d.Allowed, d.Degraded, tc.allowed, !evicting)
			}
			switch {
			case evicting:
				if p.store.Errors() != 0 || p.info("evicted_keys") == 0 {
					t.Errorf("errors %d, evicted keys %d: want Redis to evict without an error", p.store.Errors(), p.info("evicted_keys"))
				}
				if d.Remaining != 9 {
					t.Errorf("the victim's key came back with %d remaining, want 9 (a fresh bucket)", d.Remaining)
				}
			case !tc.allowed:
				// More junk opens the breaker (3 failures in a row); the
				// victim stays refused without Redis too. Redis's used
				// memory moves a little (its clients' buffers), so a
				// request may fit again: junk is added until it does not.
				for i := 0; i < 1000 && !p.store.Degraded(); i++ {
					p.l.Allow(ctx, "more-"+strconv.Itoa(i), time.Now(), 10)
				}
				if !p.store.Degraded() {
					t.Errorf("the breaker is not open after %d errors", p.store.Errors())
				}
				if d, _ := p.l.Allow(ctx, "user=me", time.Now(), 1); d.Allowed {
					t.Errorf("the victim was allowed with the breaker open: %+v", d)
				}
				if d, _ := p.l.Allow(ctx, "newcomer", time.Now(), 1); d.Allowed {
					t.Errorf("a new client was allowed while Redis is full under deny: %+v", d)
				}
			}
		})
	}
}
