package leases

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// The rules below are each one function's, pinned at exact instants on
// entries built by hand: which entries share a shard is the hash seed's
// choice, and a key's rate is hard to place on a period's boundary from
// outside.

// boundLimit returns l bound, Bounded, into a Limiter over s, as a
// driver.Limit.
func boundLimit(t *testing.T, s *Store, l limiter.Limit) driver.Limit {
	t.Helper()
	lim, err := limiter.New(s, "p", l.WithAccuracy(limiter.Bounded))
	if err != nil {
		t.Fatal(err)
	}
	return lim.Limits()[0].Driver()
}

// overMemory returns a tier with opt over a fresh memory store.
func overMemory(opt Options) *Store {
	return New(memstore.New(memstore.Options{}), opt)
}

// fixedWindow returns a fixed window of limit requests a window, Exact.
func fixedWindow(t *testing.T, limit int64, window time.Duration) limiter.Limit {
	t.Helper()
	fw, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limit, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	return fw
}

// TestRateOverTwoPeriods: a key's rate is what it was admitted in the
// period going on or the one before, whichever is more, until a whole
// period has passed since the current one began: then the current one
// alone, and nothing once two have.
func TestRateOverTwoPeriods(t *testing.T) {
	const p = time.Second
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	e := &entry{start: t0}
	for _, step := range []struct {
		at   time.Duration
		n    int64 // units admitted at at (0: none)
		want int64 // the rate at at, after them
	}{
		{0, 5, 5},
		{p - 1, 0, 5},
		{p, 3, 5},     // a new period: the one before (5) is more
		{p + 1, 0, 5}, // still within it
		{2 * p, 0, 3}, // the new one a whole period old: it alone
		{3*p - 1, 0, 3},
		{3 * p, 0, 0}, // two periods old: nothing
		{3 * p, 1, 1}, // the one before it was two periods ago: forgotten
		{4*p - 1, 0, 1},
	} {
		now := t0.Add(step.at)
		if step.n > 0 {
			e.count(now, step.n, p)
		}
		if got := e.rate(now, p); got != step.want {
			t.Errorf("at %v (after %d admitted): rate %d, want %d", step.at, step.n, got, step.want)
		}
	}
}

// evictCase is a shard's entries for evict: each key's last use before
// now, its lease, and whether a renewal is in flight.
type evictEntry struct {
	used     time.Duration // before now
	left     int64
	expires  time.Duration // after now
	renewing bool
}

// TestEvictRules: a full shard drops an entry that holds no lease, one
// unused for two lease times first, else the least recently used; an
// entry holding a lease (any unit of one that has not ended) or waiting
// for one is never dropped. Map order is random: each case runs on many
// fresh maps, the rule holding for every order.
func TestEvictRules(t *testing.T) {
	const lt = time.Second
	now := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		entries map[string]evictEntry
		want    string // the key dropped; "" for none
	}{
		{"idle before recent", map[string]evictEntry{
			"recent": {used: lt},
			"idle":   {used: 2*lt + 1},
		}, "idle"},
		{"idle before recent, however old the recent", map[string]evictEntry{
			"a":    {used: 2 * lt},
			"b":    {used: lt},
			"idle": {used: 5 * lt},
		}, "idle"},
		{"none idle: the least recently used", map[string]evictEntry{
			"a":   {used: lt},
			"b":   {used: lt / 2},
			"lru": {used: 3 * lt / 2},
			"c":   {used: 0},
		}, "lru"},
		{"a lease's last unit protects it", map[string]evictEntry{
			"one": {used: 10 * lt, left: 1, expires: lt},
		}, ""},
		{"a renewal in flight protects it", map[string]evictEntry{
			"renewing": {used: 10 * lt, renewing: true},
		}, ""},
		{"an ended lease does not", map[string]evictEntry{
			"held":  {used: 10 * lt, left: 5, expires: lt},
			"ended": {used: 0, left: 5, expires: 0},
		}, "ended"},
		{"a used-up lease does not", map[string]evictEntry{
			"held":    {used: 10 * lt, left: 5, expires: lt},
			"used up": {used: 0, left: 0, expires: lt},
		}, "used up"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := overMemory(Options{LeaseTime: lt})
			for range 64 {
				sh := &shard{m: map[entryKey]*entry{}}
				for k, v := range c.entries {
					sh.m[entryKey{1, k}] = &entry{sh: sh, used: now.Add(-v.used), left: v.left, expires: now.Add(v.expires), renewing: v.renewing}
				}
				found := s.evict(sh, now)
				if found != (c.want != "") {
					t.Fatalf("evict = %v, want %v", found, c.want != "")
				}
				if _, kept := sh.m[entryKey{1, c.want}]; c.want != "" && kept || len(sh.m) != len(c.entries)-map[bool]int{true: 1}[found] {
					var left []string
					for k := range sh.m {
						left = append(left, k.key)
					}
					t.Fatalf("kept %v, want %q dropped", left, c.want)
				}
			}
		})
	}
}

// TestFullShardTracksNoMore: a shard holding as many keys as it may
// drops one that holds no lease for a new key, and tracks no new key
// while every one it holds has a lease.
func TestFullShardTracksNoMore(t *testing.T) {
	now := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
	s := overMemory(Options{MaxKeys: 1, LeaseTime: time.Second})
	l := boundLimit(t, s, fixedWindow(t, 1000, time.Hour))
	sh := s.shard(&l, "old")
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := s.entry(sh, &l, "old", now)
	if old == nil || len(sh.m) != 1 {
		t.Fatalf("the first key of a shard: %v, %d tracked", old, len(sh.m))
	}
	old.left, old.expires = 3, now.Add(time.Second)
	if e := s.entry(sh, &l, "new", now); e != nil || len(sh.m) != 1 || sh.m[entryKey{int32(l.StateID()), "old"}] != old {
		t.Fatalf("a new key in a shard full of leases: %v, %d tracked; want none, the lease kept", e, len(sh.m))
	}
	old.left = 0
	if e := s.entry(sh, &l, "new", now); e == nil || len(sh.m) != 1 || sh.m[entryKey{int32(l.StateID()), "new"}] != e {
		t.Fatalf("a new key in a shard whose key holds no lease: %v, %d tracked; want it in the old one's place", e, len(sh.m))
	}
}

// TestGrantKeepsWhatIsInHand: a granted lease adds to what is in hand,
// unless the lease in hand has ended, or (a fixed window) was counted in
// another window: the shared store's ResetAt more than half a window
// later. A ResetAt that moves by a little is the same window.
func TestGrantKeepsWhatIsInHand(t *testing.T) {
	now := time.Date(2000, 1, 1, 1, 0, 30, 0, time.UTC)
	const w = time.Minute
	s := overMemory(Options{LeaseTime: time.Second})
	fw := fixedWindow(t, 1000, w)
	sl, _ := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 1000, Window: w})
	end := now.Truncate(w).Add(w) // the window's end
	for _, c := range []struct {
		name    string
		l       limiter.Limit
		expires time.Time // of the lease in hand (3 units)
		window  time.Time // its window's end (a fixed window's)
		resetAt time.Time // the grant's
		want    int64
	}{
		{"in hand", sl, now.Add(time.Second), time.Time{}, end, 13},
		{"ended", sl, now, time.Time{}, end, 10},
		{"ended long ago", sl, now.Add(-time.Hour), time.Time{}, end, 10},
		{"same window", fw, end, end, end, 13},
		{"same window, ResetAt moved by half a window", fw, end, end, end.Add(w / 2), 13},
		{"next window", fw, end, end, end.Add(w), 10},
		{"the window after", fw, end, end, end.Add(3 * w), 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := boundLimit(t, s, c.l)
			e := &entry{left: 3, expires: c.expires, window: c.window}
			g := Grant{Units: 10, Expires: now.Add(time.Second), Decision: driver.Decision{Allowed: true, ResetAt: c.resetAt}}
			s.grant(&l, e, g, now)
			if e.left != c.want || e.size != 10 || !e.expires.Equal(g.Expires) {
				t.Errorf("left %d, size %d, expires %v; want %d, 10, %v", e.left, e.size, e.expires, c.want, g.Expires)
			}
		})
	}
}

// asked records the size of each lease asked of it.
type asked struct {
	driver.Store
	mu sync.Mutex
	ns []int64
}

func (a *asked) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	a.mu.Lock()
	a.ns = append(a.ns, n)
	a.mu.Unlock()
	return a.Store.Decide(ctx, limits, keys, now, n)
}

// TestLeaseSizeNearWindowEnd: a lease holds half of what the key's rate
// admits in a lease time; when a fixed window ends before the lease
// would, no more than the rate uses before the window ends, less what is
// in hand (rounded to the nearest, at least MinLease). A window that ends
// no sooner than the lease, or has ended (the lease in hand was an
// earlier window's), leaves the size to the rate.
func TestLeaseSizeNearWindowEnd(t *testing.T) {
	const lt = time.Second
	for _, c := range []struct {
		name       string
		rest       time.Duration // to the window's end
		left, last int64         // in hand, and the last lease's size
		want       int64
	}{
		{"window far", time.Hour, 1, 8, 20},
		{"window ends in a quarter lease time", lt / 4, 1, 8, 10 - 1},
		{"rounded to the nearest", lt/4 + lt/100, 1, 8, 10 - 1},   // 10.4 → 10
		{"rounded to the nearest, up", lt/4 + 3*lt/200, 0, 0, 11}, // 10.6 → 11
		{"at least MinLease", lt / 100, 3, 8, 2},
		{"a nanosecond before its end", 1, 0, 0, 2},
		{"at its end: an earlier window", 0, 0, 0, 20},
		{"ending with the lease", lt, 25, 60, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shared := &asked{Store: memstore.New(memstore.Options{})}
				s := New(shared, Options{LeaseTime: lt, MaxShare: 0.1, MinLease: 2})
				l := boundLimit(t, s, fixedWindow(t, 1000, 24*time.Hour))
				now := time.Now()
				sh := s.shard(&l, "k")
				sh.mu.Lock()
				e := s.entry(sh, &l, "k", now)
				// A rate of 40 a lease time; the lease in hand ends with
				// the window, or with the lease time.
				e.cur, e.start = 40, now
				e.left, e.size, e.window = c.left, c.last, now.Add(c.rest)
				e.expires = now.Add(min(c.rest, lt))
				s.maybeRenew(&l, "k", e, now)
				sh.mu.Unlock()
				synctest.Wait()
				shared.mu.Lock()
				defer shared.mu.Unlock()
				if fmt.Sprint(shared.ns) != fmt.Sprint([]int64{c.want}) {
					t.Errorf("leases asked: %v, want one of %d", shared.ns, c.want)
				}
			})
		})
	}
}

// TestEvictsByLastDecision: a key's decisions mark it used: of a full
// shard's two keys, the one decided two lease times ago is dropped for a
// new key, not the one decided since. (Map order is random: the rule
// holds for every order, checked on many tables.)
func TestEvictsByLastDecision(t *testing.T) {
	const lt = time.Second
	t0 := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
	fw := fixedWindow(t, 1000, time.Hour)
	for range 40 {
		s := overMemory(Options{MaxKeys: 2 * shardCount, LeaseTime: lt})
		l := boundLimit(t, s, fw)
		// Three keys of one shard, which holds two.
		sh := s.shard(&l, "k0")
		keys := []string{"k0"}
		for i := 1; len(keys) < 3; i++ {
			if k := fmt.Sprint("k", i); s.shard(&l, k) == sh {
				keys = append(keys, k)
			}
		}
		s.try(&l, keys[0], t0, 1)
		s.try(&l, keys[1], t0.Add(3*lt/2), 1)
		s.try(&l, keys[2], t0.Add(5*lt/2), 1)
		id := int32(l.StateID())
		if _, ok := sh.m[entryKey{id, keys[0]}]; ok || len(sh.m) != 2 {
			t.Fatalf("%d keys kept, %s among them: want it dropped, decided two lease times before the new key", len(sh.m), keys[0])
		}
	}
}
