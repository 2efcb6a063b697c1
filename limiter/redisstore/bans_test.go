package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// These tests are in package redisstore to reach the mirror's test hooks
// (kick, synced, the mirror's length).

// epoch is the tests' clock for Run when they pass their own instants:
// long before any of them, so that nothing is judged expired by the wall
// clock behind their backs.
func epoch() time.Time { return time.Unix(0, 0) }

// startBans returns a penalty box on c whose Run goes on until the test
// ends (and is waited for then), once it has loaded the records.
func startBans(t testing.TB, c redis.UniversalClient, o BanOptions) *Bans {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	b := NewBans(c, o)
	following(t, b.Run, &b.follower)
	return b
}

func client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBans holds the Redis penalty box to the conformance suite, with
// Run keeping the mirror: each subtest has a prefix of its own.
func TestBans(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	limitertest.RunBans(t, func(t *testing.T) perkey.Bans {
		return startBans(t, c, BanOptions{Prefix: redistest.Prefix(t), Clock: epoch, Resync: time.Hour})
	})
}

// TestBansCluster: the same on a Redis Cluster of three masters (every
// key of the penalty box in one slot, messages broadcast by the cluster),
// and a ban made through one node's client seen by another's.
func TestBansCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.SharedCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	limitertest.RunBans(t, func(t *testing.T) perkey.Bans {
		return startBans(t, c, BanOptions{Prefix: redistest.Prefix(t), Clock: epoch, Resync: time.Hour})
	})
	c2 := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[2:]})
	defer c2.Close()
	a := startBans(t, c, BanOptions{Prefix: redistest.Prefix(t) + "shared:"})
	b := startBans(t, c2, BanOptions{Prefix: redistest.Prefix(t) + "shared:"})
	checkShared(t, a, b)
}

var hourBan = perkey.BanParams{Duration: time.Hour, Factor: 2, Max: 24 * time.Hour, Memory: 24 * time.Hour}

// TestBansShared: two instances on one Redis, each with its own client:
// a ban or a lift on one is seen by the other within a second (measured),
// and offences from both count towards one level.
func TestBansShared(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	a := startBans(t, client(t, addr), BanOptions{})
	b := startBans(t, client(t, addr), BanOptions{})
	checkShared(t, a, b)
}

func checkShared(t *testing.T, a, b *Bans) {
	t.Helper()
	ctx := context.Background()
	seen := func(who *Bans, key string, want bool) time.Duration {
		t.Helper()
		begin := time.Now()
		for {
			_, ok := who.Banned("p", key, time.Now())
			if ok == want {
				return time.Since(begin)
			}
			if time.Since(begin) > time.Second {
				t.Fatalf("Banned(%s) still %v a second later", key, ok)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 5 {
		key := "client-" + strconv.Itoa(i)
		if _, err := a.Ban(ctx, "p", key, hourBan, time.Now()); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: banned on a, seen by b after %v", key, seen(b, key, true))
		ban, err := b.Ban(ctx, "p", key, hourBan, time.Now())
		if err != nil || ban.Level != 1 {
			t.Fatalf("offence on b during a's ban: %+v, %v; want level 1 (no new ban)", ban, err)
		}
		ban, err = b.Ban(ctx, "p", key, hourBan, ban.Until)
		if err != nil || ban.Level != 2 {
			t.Fatalf("offence on b after a's ban: %+v, %v; want level 2", ban, err)
		}
		if ok, err := b.Lift(ctx, "p", key); !ok || err != nil {
			t.Fatalf("Lift on b: %v, %v", ok, err)
		}
		t.Logf("%s: lifted on b, seen by a after %v", key, seen(a, key, false))
	}
	// Offences of one key from both instances at once: one ban, level 1,
	// on Redis and in both mirrors.
	now := time.Now()
	// Exactly one of them began the ban: its record's Since is its instant
	// exactly; the others' is the stored one, in milliseconds.
	began := 0
	for _, ban := range limitertest.BanBurst(t, []perkey.Bans{a, b}, "p", "contested", hourBan, now, 16, 4) {
		if ban.Since.Equal(now) {
			began++
		} else if !ban.Since.Equal(now.Truncate(time.Millisecond)) || now.Truncate(time.Millisecond).Equal(now) {
			t.Fatalf("an offence of a burst on two instances: %+v, want since %v", ban, now)
		}
		if ban.Level != 1 {
			t.Fatalf("an offence of a burst on two instances: %+v, want level 1", ban)
		}
	}
	if began != 1 {
		t.Errorf("%d offences of a burst began the ban, want 1", began)
	}
	for _, who := range []*Bans{a, b} {
		deadline := time.Now().Add(time.Second)
		for ban, _ := who.Banned("p", "contested", now); ban.Level != 1; ban, _ = who.Banned("p", "contested", now) {
			if time.Now().After(deadline) {
				t.Fatalf("an instance's mirror is at level %d a second after the burst, want 1", ban.Level)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// rawHSet writes a record behind the mirrors' backs: no change number, no
// message.
func rawHSet(t *testing.T, c redis.UniversalClient, b *Bans, policy, key string, since, until time.Time, level int64) {
	t.Helper()
	hash, byExpiry := b.policyKeys(policy)
	ctx := context.Background()
	v := strconv.FormatInt(since.UnixMilli(), 10) + " " + strconv.FormatInt(until.UnixMilli(), 10) + " " + strconv.FormatInt(level, 10) +
		" " + strconv.FormatInt(until.UnixMilli(), 10) + " 0"
	if err := c.HSet(ctx, hash, key, v).Err(); err != nil {
		t.Fatal(err)
	}
	c.ZAdd(ctx, byExpiry, redis.Z{Score: float64(until.UnixMilli()), Member: key})
	c.ZAdd(ctx, b.policies, redis.Z{Score: float64(until.UnixMilli()), Member: policy})
}

// forceResync has b's Run resync in full now, and waits for it.
func forceResync(t *testing.T, b *Bans) {
	t.Helper()
	done := make(chan struct{})
	b.kick <- done
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("no resync within 10s: %v", b.LastError())
	}
}

// TestBansResync: records written or deleted behind the mirror's back
// (no message) appear and vanish with a full resync; expired ones are
// left out and deleted on Redis, with their policy once it has no more.
func TestBansResync(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	var now atomic.Int64
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b := startBans(t, c, BanOptions{Clock: clock, Resync: time.Hour})
	rawHSet(t, c, b, "p", "ghost", t0, t0.Add(time.Hour), 3)
	rawHSet(t, c, b, "q", "brief", t0, t0.Add(time.Minute), 1)
	if _, ok := b.Banned("p", "ghost", t0); ok {
		t.Fatal("a record written behind the mirror's back seen without a resync")
	}
	forceResync(t, b)
	if ban, ok := b.Banned("p", "ghost", t0); !ok || ban.Level != 3 || !ban.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after the resync: %+v, %v", ban, ok)
	}
	if _, ok := b.Banned("q", "brief", t0); !ok {
		t.Fatal("q/brief not loaded")
	}
	// Deleted behind its back, q/brief stays until a resync; once expired
	// p/ghost is left out and deleted, and q with it.
	hash, _ := b.policyKeys("q")
	c.HDel(context.Background(), hash, "brief")
	forceResync(t, b)
	if _, ok := b.Banned("q", "brief", t0); ok {
		t.Fatal("a record deleted on Redis survived the resync")
	}
	now.Store(t0.Add(2 * time.Hour).UnixNano())
	forceResync(t, b)
	if n := b.mirror.len(); n != 0 {
		t.Errorf("mirror holds %d records after every one expired", n)
	}
	ctx := context.Background()
	hash, _ = b.policyKeys("p")
	if n := c.HLen(ctx, hash).Val(); n != 0 {
		t.Errorf("%d expired records left on Redis", n)
	}
	if names := c.ZRange(ctx, b.policies, 0, -1).Val(); len(names) != 0 {
		t.Errorf("policies without records still listed: %v", names)
	}
}

// TestBansGap: a message whose number skips one (a lost message: here a
// change made behind the mirror's back) makes the receiver resync at
// once, which brings the missing record.
func TestBansGap(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	c := client(t, addr)
	a := startBans(t, c, BanOptions{Resync: time.Hour})
	b := startBans(t, client(t, addr), BanOptions{Resync: time.Hour})
	now := time.Now()
	rawHSet(t, c, a, "p", "lost", now, now.Add(time.Hour), 1)
	c.Incr(context.Background(), a.seqKey)
	if _, err := a.Ban(context.Background(), "p", "other", hourBan, now); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for _, ok := b.Banned("p", "lost", now); !ok; _, ok = b.Banned("p", "lost", now) {
		if time.Now().After(deadline) {
			t.Fatal("the record of a lost message is not seen a second after the gap")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBansReconnect: when the subscription's connection is dropped,
// go-redis reconnects and Run resyncs in full, picking up what it missed.
func TestBansReconnect(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	b := startBans(t, client(t, c.Options().Addr), BanOptions{Resync: time.Hour})
	now := time.Now()
	rawHSet(t, c, b, "p", "missed", now, now.Add(time.Hour), 1)
	if n, err := c.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, ok := b.Banned("p", "missed", now); !ok; _, ok = b.Banned("p", "missed", now) {
		if time.Now().After(deadline) {
			t.Fatal("no resync within 10s of the subscription's connection dropping")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBansOutage: with Redis down, Ban fails with ErrStoreUnavailable and
// Banned goes on answering from the mirror; once Redis is back (empty,
// without persistence) Run writes the mirror's bans back.
func TestBansOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	b := startBans(t, c, BanOptions{Timeout: 200 * time.Millisecond, Resync: 200 * time.Millisecond})
	ctx := context.Background()
	now := time.Now()
	if _, err := b.Ban(ctx, "p", "k", hourBan, now); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := b.Ban(ctx, "p", "k2", hourBan, now); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Ban with Redis down: %v, want ErrStoreUnavailable", err)
	}
	if _, err := b.Lift(ctx, "p", "k"); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Lift with Redis down: %v, want ErrStoreUnavailable", err)
	}
	// Run's checks fail meanwhile, every Resync.
	failed := b.Errors()
	waitTrue(t, 10*time.Second, "three failed checks with Redis down", func() bool { return b.Errors() >= failed+3 })
	if _, ok := b.Banned("p", "k", now); !ok {
		t.Fatal("the mirror forgot a ban while Redis was down")
	}
	errs := b.Errors()
	srv.Restart()
	// Redis came back empty (no persistence): the instance writes back
	// what it holds.
	hash, _ := b.policyKeys("p")
	deadline := time.Now().Add(10 * time.Second)
	for c.HExists(ctx, hash, "k").Val() == false {
		if time.Now().After(deadline) {
			t.Fatalf("the ban is not back on Redis 10s after it restarted (%d errors, last %v)", b.Errors(), b.LastError())
		}
		if _, ok := b.Banned("p", "k", now); !ok {
			t.Fatal("the mirror dropped a ban Redis lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if errs < 3 {
		t.Errorf("%d errors counted while Redis was down", errs)
	}
	if ban, err := b.Ban(ctx, "p", "k2", hourBan, now); err != nil || ban.Level != 1 {
		t.Fatalf("Ban after Redis came back: %+v, %v", ban, err)
	}
}

// TestBansBound: a policy on Redis, and a mirror, hold at most MaxBans
// records; Redis drops the one that expires soonest, and says so to
// every mirror.
func TestBansBound(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	c := client(t, addr)
	a := startBans(t, c, BanOptions{MaxBans: 3, Resync: time.Hour})
	other := startBans(t, client(t, addr), BanOptions{MaxBans: 3, Resync: time.Hour})
	ctx := context.Background()
	now := time.Now()
	// Key i expires at now+24h+i s; k0 offends again and expires last.
	for i := range 3 {
		if _, err := a.Ban(ctx, "p", "k"+strconv.Itoa(i), hourBan, now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	a.Ban(ctx, "p", "k0", hourBan, now.Add(time.Hour)) // after its ban: 2h more
	a.Ban(ctx, "p", "k3", hourBan, now.Add(11*time.Second))
	hash, _ := a.policyKeys("p")
	keys := c.HKeys(ctx, hash).Val()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"k0", "k2", "k3"}) {
		t.Fatalf("records on Redis: %v, want k0 k2 k3 (k1 expired soonest)", keys)
	}
	deadline := time.Now().Add(time.Second)
	for _, ok := other.Banned("p", "k1", now.Add(time.Minute)); ok; _, ok = other.Banned("p", "k1", now.Add(time.Minute)) {
		if time.Now().After(deadline) {
			t.Fatal("another mirror still holds the evicted record a second later")
		}
		time.Sleep(time.Millisecond)
	}
	// The mirror's own bound, over several policies.
	for i := range 5 {
		a.Ban(ctx, "q"+strconv.Itoa(i), "k", hourBan, now)
	}
	if n := a.mirror.len(); n > 3 {
		t.Errorf("mirror holds %d records, above MaxBans 3", n)
	}
}

// TestBansRedisExpiry: an offence deletes its policy's expired records on
// Redis, and the keys carry TTLs that end with their latest record.
func TestBansRedisExpiry(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	b := startBans(t, c, BanOptions{Clock: epoch, Resync: time.Hour})
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	short := perkey.BanParams{Duration: time.Minute, Factor: 1, Max: time.Minute, Memory: 2 * time.Minute}
	b.Ban(ctx, "p", "old", short, t0)
	b.Ban(ctx, "p", "new", short, t0.Add(2*time.Minute)) // old expired at t0+2m
	hash, byExpiry := b.policyKeys("p")
	if keys := c.HKeys(ctx, hash).Val(); !slices.Equal(keys, []string{"new"}) {
		t.Errorf("records after an offence past old's expiry: %v, want [new]", keys)
	}
	if n := c.ZCard(ctx, byExpiry).Val(); n != 1 {
		t.Errorf("expiry index holds %d, want 1", n)
	}
	for _, k := range []string{hash, byExpiry, b.policies} {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= time.Minute || ttl > 2*time.Minute {
			t.Errorf("%s: TTL %v, want new's 2m memory", k, ttl)
		}
	}
	if ttl := c.PTTL(ctx, b.seqKey).Val(); ttl != -1 {
		t.Errorf("the change counter has TTL %v; it must never expire", ttl)
	}
}

// TestMessages: messages and records read back what the scripts write,
// and unreadable ones are refused.
func TestMessages(t *testing.T) {
	r, err := parseMessage("42 7 900 2 1000 2000 3000 3\npolkey with\nnewline")
	if err != nil || r.ep != 42 || r.seq != 7 || r.ver != 900 || r.level != 2 || r.since != 1e9 || r.until != 2e9 || r.expires != 3e9 ||
		r.k != (banKey{"pol", "key with\nnewline"}) {
		t.Errorf("parseMessage: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "42 7 900 2 1000 2000 3000\npk", "42 7 900 2 1000 2000 3000 9\npk", "42 7 900 x 1000 2000 3000 1\npk",
		"42 7 900 2 1000 2000 3000 -1\npk", "7 2 1000 2000 3000 1\npk"} {
		if _, err := parseMessage(bad); err == nil {
			t.Errorf("parseMessage(%q) accepted", bad)
		}
	}
	if _, ok := parseRecord("p", "k", "1 2 3"); ok {
		t.Error("a short record accepted")
	}
	if r, ok := parseRecord("p", "k", "1000 2000 1 3000 5"); !ok || r.ver != 1000 {
		t.Errorf("a record without version: %+v, %v; want its since as version", r, ok)
	}
}

// BenchmarkBanned is the check every request makes, from the mirror: no
// allocation, no round trip.
func BenchmarkBanned(b *testing.B) {
	c := client(b, redistest.Start(b).Addr())
	box := startBans(b, c, BanOptions{})
	ctx := context.Background()
	now := time.Now()
	for i := range 1000 {
		if _, err := box.Ban(ctx, "api", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), hourBan, now); err != nil {
			b.Fatal(err)
		}
	}
	keys := []string{"10.0.0.1", "192.0.2.1"} // banned, not
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			box.Banned("api", keys[i&1], now)
			i++
		}
	})
}

// TestBannedAllocs pins the mirror's zero allocations.
func TestBannedAllocs(t *testing.T) {
	b := NewBans(nil, BanOptions{})
	b.mirror.put(&mirrorRec{k: banKey{"api", "10.0.0.1"}, level: 1, until: 1e18, expires: 1e18, seq: 1, ver: 1}, 0)
	if n := testing.AllocsPerRun(1000, func() {
		b.Banned("api", "10.0.0.1", time.Unix(0, 1))
		b.Banned("api", "192.0.2.1", time.Unix(0, 1))
	}); n != 0 {
		t.Errorf("Banned allocates %v times a call", n)
	}
}
