package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// These tests are in package redisstore to reach the mirror's test hooks
// (kick, the mirror itself).

// startOverrides returns an override store on c whose Run goes on until
// the test ends (and is waited for then), once it has loaded the
// overrides.
func startOverrides(t testing.TB, c redis.UniversalClient, o OverrideOptions) *Overrides {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	s := NewOverrides(c, o)
	following(t, s.Run, &s.follower)
	return s
}

// TestOverrides holds the Redis override store to the conformance suite
// (not in parallel with other tests: it counts allocations):
// each subtest has a prefix of its own, and a restart is a new store (with
// its own client) on the same server and prefix.
func TestOverrides(t *testing.T) {
	addr := redistest.Start(t).Addr()
	limitertest.RunOverrides(t, func(t *testing.T) func() perkey.Overrides {
		prefix := redistest.Prefix(t)
		return func() perkey.Overrides {
			return startOverrides(t, client(t, addr), OverrideOptions{Prefix: prefix, MaxOverrides: limitertest.OverridesBound, Resync: time.Hour})
		}
	})
}

// TestOverridesCluster: the same (not in parallel either) on a Redis
// Cluster of three masters (the keys in one slot, messages broadcast by
// the cluster), and a change made through one node's client seen by
// another's.
func TestOverridesCluster(t *testing.T) {
	addrs := redistest.SharedCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	limitertest.RunOverrides(t, func(t *testing.T) func() perkey.Overrides {
		prefix := redistest.Prefix(t)
		return func() perkey.Overrides {
			return startOverrides(t, c, OverrideOptions{Prefix: prefix, MaxOverrides: limitertest.OverridesBound, Resync: time.Hour})
		}
	})
	c2 := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[2:]})
	defer c2.Close()
	prefix := redistest.Prefix(t) + "shared:"
	checkOvShared(t, startOverrides(t, c, OverrideOptions{Prefix: prefix}), startOverrides(t, c2, OverrideOptions{Prefix: prefix}))
}

// TestOverridesShared: two instances on one Redis, each with its own
// client: a Set, a replacement and a Remove on one are seen by the other
// within a second (measured).
func TestOverridesShared(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	checkOvShared(t, startOverrides(t, client(t, addr), OverrideOptions{}), startOverrides(t, client(t, addr), OverrideOptions{}))
}

var ovT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func ovScaled(key string, scale float64) perkey.Override {
	return perkey.Override{Policy: "api", Key: key, Scale: scale, SetAt: ovT0}
}

// waitOv polls who's Get until it answers a scale of want (0 for no
// override), at most a second, and returns how long that took.
func waitOv(t *testing.T, who *Overrides, key string, want float64) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		o, ok := who.Get("api", key)
		if ok && o.Scale == want || !ok && want == 0 {
			return time.Since(begin)
		}
		if time.Since(begin) > time.Second {
			t.Fatalf("Get(api, %s) = %v, %v a second later; want scale %v", key, o.Scale, ok, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func checkOvShared(t *testing.T, a, b *Overrides) {
	t.Helper()
	ctx := context.Background()
	var slowest time.Duration
	for i := range 5 {
		key := "partner-" + strconv.Itoa(i)
		if err := a.Set(ctx, ovScaled(key, 10)); err != nil {
			t.Fatal(err)
		}
		d1 := waitOv(t, b, key, 10)
		if err := b.Set(ctx, ovScaled(key, 20)); err != nil {
			t.Fatal(err)
		}
		d2 := waitOv(t, a, key, 20)
		if ok, err := b.Remove(ctx, "api", key); !ok || err != nil {
			t.Fatalf("Remove on b: %v, %v", ok, err)
		}
		d3 := waitOv(t, a, key, 0)
		t.Logf("%s: set on a, seen by b after %v; replaced on b, seen by a after %v; removed on b, seen by a after %v", key, d1, d2, d3)
		slowest = max(slowest, d1, d2, d3)
	}
	t.Logf("slowest: %v", slowest)
	// Each reads its own writes at once.
	if err := a.Set(ctx, ovScaled("own", 3)); err != nil {
		t.Fatal(err)
	}
	if o, ok := a.Get("api", "own"); !ok || o.Scale != 3 {
		t.Fatalf("Get right after Set on the same instance = %+v, %v", o, ok)
	}
}

// rawOv writes an override behind the mirrors' backs: no change number, no
// message.
func rawOv(t *testing.T, c redis.UniversalClient, s *Overrides, o perkey.Override) {
	t.Helper()
	js, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(context.Background(), s.hash, ovField(o.Policy, o.Key), "0 "+string(js)).Err(); err != nil {
		t.Fatal(err)
	}
}

// forceOvResync has s's Run resync in full now, and waits for it.
func forceOvResync(t *testing.T, s *Overrides) {
	t.Helper()
	done := make(chan struct{})
	s.kick <- done
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("no resync within 10s: %v", s.LastError())
	}
}

// TestOverridesMissedMessage: a change whose message an instance missed
// (here published on another channel) is not seen until a resync, which
// a forced one brings; so does a removal it missed.
func TestOverridesMissedMessage(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	c := client(t, addr)
	s := startOverrides(t, c, OverrideOptions{Resync: time.Hour})
	ctx := context.Background()
	o := ovScaled("missed", 7)
	js, _ := o.MarshalJSON()
	lens := strconv.Itoa(len(o.Policy)) + " " + strconv.Itoa(len(o.Key))
	life := TombstoneLife.Milliseconds()
	res, err := setOverrideScript.Run(ctx, c, s.scriptKeys(), ovField(o.Policy, o.Key), js, 100, "elsewhere", lens, o.Policy+o.Key,
		newEpoch(), time.Now().UnixMilli(), life).Int64Slice()
	if err != nil || res[0] != 1 {
		t.Fatalf("set script: %v, %v", res, err)
	}
	if _, ok := s.Get("api", "missed"); ok {
		t.Fatal("an override whose message was missed seen without a resync")
	}
	forceOvResync(t, s)
	if got, ok := s.Get("api", "missed"); !ok || got.Scale != 7 {
		t.Fatalf("after the resync: %+v, %v", got, ok)
	}
	if _, err := removeOverrideScript.Run(ctx, c, s.scriptKeys(), ovField("api", "missed"), "elsewhere", lens, "apimissed",
		newEpoch(), time.Now().UnixMilli(), life, "0").Int64Slice(); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("api", "missed"); !ok {
		t.Fatal("a removal whose message was missed seen without a resync")
	}
	forceOvResync(t, s)
	if _, ok := s.Get("api", "missed"); ok {
		t.Fatal("a removed override survived the resync")
	}
	if n, live := s.mirror.len(), s.Len(); n != 1 || live != 0 {
		t.Fatalf("mirror holds %d entries, %d live; want its tombstone alone", n, live)
	}
}

// TestOverridesResync: overrides written or deleted behind the mirror's
// back (no change number, no message) appear and vanish with a full
// resync, and a change the mirror made meanwhile is kept.
func TestOverridesResync(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	s := startOverrides(t, c, OverrideOptions{Resync: time.Hour})
	rawOv(t, c, s, ovScaled("ghost", 3))
	if _, ok := s.Get("api", "ghost"); ok {
		t.Fatal("an override written behind the mirror's back seen without a resync")
	}
	forceOvResync(t, s)
	if o, ok := s.Get("api", "ghost"); !ok || o.Scale != 3 || !o.SetAt.Equal(ovT0) {
		t.Fatalf("after the resync: %+v, %v", o, ok)
	}
	c.HDel(context.Background(), s.hash, ovField("api", "ghost"))
	forceOvResync(t, s)
	if _, ok := s.Get("api", "ghost"); ok {
		t.Fatal("an override deleted on Redis survived the resync")
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
}

// TestOverridesGap: a message whose number skips one (a lost message:
// here a change made behind the mirror's back) makes the receiver resync
// at once, which brings the missing override.
func TestOverridesGap(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	c := client(t, addr)
	a := startOverrides(t, c, OverrideOptions{Resync: time.Hour})
	b := startOverrides(t, client(t, addr), OverrideOptions{Resync: time.Hour})
	rawOv(t, c, a, ovScaled("lost", 4))
	c.Incr(context.Background(), a.seqKey)
	if err := a.Set(context.Background(), ovScaled("other", 2)); err != nil {
		t.Fatal(err)
	}
	waitOv(t, b, "lost", 4)
}

// TestOverridesUnreadable: records this version cannot read are skipped by
// the resync and List, and counted; the others load.
func TestOverridesUnreadable(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	s := startOverrides(t, c, OverrideOptions{Resync: time.Hour})
	ctx := context.Background()
	// The records are written behind the store's back, after its first
	// resync: no write of its own and no message can start another resync,
	// so the forced one below is the only one that reads them (a Set here
	// published a message that could arrive late and resync a second time).
	select {
	case <-s.synced:
	case <-time.After(10 * time.Second):
		t.Fatalf("no first resync within 10s: %v", s.LastError())
	}
	rawOv(t, c, s, ovScaled("good", 2))
	other, _ := ovScaled("other", 2).MarshalJSON()
	for field, v := range map[string]string{
		ovField("api", "future"):   `5 {"policy":"api","key":"future","scale":2,"colour":"red"}`,
		ovField("api", "noseq"):    `{"policy":"api","key":"noseq","scale":2}`,
		ovField("api", "invalid"):  `5 {"policy":"api","key":"invalid","scale":-1}`,
		ovField("api", "misfiled"): "5 " + string(other),
		"nolength":                 `5 {"policy":"api","key":"x","scale":2}`,
	} {
		c.HSet(ctx, s.hash, field, v)
	}
	errs := s.Errors()
	forceOvResync(t, s)
	if n := s.Errors() - errs; n != 5 {
		t.Errorf("%d errors counted for 5 unreadable records (last: %v)", n, s.LastError())
	}
	if _, ok := s.Get("api", "good"); !ok || s.Len() != 1 {
		t.Fatalf("after the resync: good %v, Len %d", ok, s.Len())
	}
	l, err := s.List(ctx, "", 10)
	if err != nil || len(l) != 1 || l[0].Key != "good" {
		t.Fatalf("List = %v, %v", l, err)
	}
	// An unreadable message makes the mirror resync.
	if !s.receive("garbage") {
		t.Error("an unreadable message did not ask for a resync")
	}
}

// TestOverridesOutage: with Redis down, Set, Remove and List fail with
// ErrStoreUnavailable and Get goes on answering from the mirror. Redis
// restarted without persistence has lost the overrides: the instance
// writes its copy back.
func TestOverridesOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	s := startOverrides(t, c, OverrideOptions{Timeout: 200 * time.Millisecond, Resync: 200 * time.Millisecond})
	ctx := context.Background()
	if err := s.Set(ctx, ovScaled("k", 2)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := s.Set(ctx, ovScaled("k2", 2)); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Set with Redis down: %v, want ErrStoreUnavailable", err)
	}
	if _, err := s.Remove(ctx, "api", "k"); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Remove with Redis down: %v, want ErrStoreUnavailable", err)
	}
	if _, err := s.List(ctx, "", 10); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("List with Redis down: %v, want ErrStoreUnavailable", err)
	}
	// Run's checks fail meanwhile, every Resync.
	failed := s.Errors()
	waitTrue(t, 10*time.Second, "three failed checks with Redis down", func() bool { return s.Errors() >= failed+3 })
	if _, ok := s.Get("api", "k"); !ok {
		t.Fatal("the mirror forgot an override while Redis was down")
	}
	if _, ok := s.Get("api", "k2"); ok {
		t.Fatal("a failed Set is applied")
	}
	srv.Restart()
	// Redis came back empty (no persistence): the instance writes back
	// what it holds.
	deadline := time.Now().Add(10 * time.Second)
	for c.HExists(ctx, s.hash, ovField("api", "k")).Val() == false {
		if time.Now().After(deadline) {
			t.Fatalf("the override is not back on Redis 10s after it restarted (%d errors, last %v)", s.Errors(), s.LastError())
		}
		if _, ok := s.Get("api", "k"); !ok {
			t.Fatal("the mirror dropped an override Redis lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Set(ctx, ovScaled("k", 3)); err != nil {
		t.Fatalf("Set after Redis came back: %v", err)
	}
}

// TestOverridesNoExpiry: the keys on Redis never expire.
func TestOverridesNoExpiry(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.Start(t).Addr())
	s := startOverrides(t, c, OverrideOptions{})
	if err := s.Set(context.Background(), ovScaled("k", 2)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{s.hash, s.seqKey} {
		if ttl := c.PTTL(context.Background(), k).Val(); ttl != -1 {
			t.Errorf("%s: TTL %v, want none", k, ttl)
		}
	}
	if !strings.HasPrefix(s.hash, "limitproxy:{") || !strings.HasSuffix(s.hash, "}o/1/h") {
		t.Errorf("hash key %q", s.hash)
	}
}

// TestOverridesMirrorOrder: the mirror applies changes by version: a late
// message of an older change never undoes a newer one, a removal leaves a
// tombstone, and a resync keeps only the changes made after its snapshot.
func TestOverridesMirrorOrder(t *testing.T) {
	m := newOvMirror()
	k := ovKey{"api", "k"}
	set := func(ver int64, scale float64) *ovEntry {
		return &ovEntry{k: k, o: ovScaled("k", scale), ver: ver, ep: 1, seq: ver}
	}
	check := func(step string, scale float64, entries int) {
		t.Helper()
		o, ok := m.get("api", "k")
		if ok != (scale != 0) || o.Scale != scale || m.len() != entries {
			t.Fatalf("%s: Get = %v, %v with %d entries; want scale %v, %d entries", step, o.Scale, ok, m.len(), scale, entries)
		}
	}
	m.put(set(1, 2))
	check("version 1", 2, 1)
	m.put(set(3, 3))
	check("version 3", 3, 1)
	m.put(set(2, 9)) // a late message
	check("late version 2", 3, 1)
	m.put(&ovEntry{k: k, ver: 5, ep: 1, seq: 5, gone: true})
	check("removal 5", 0, 1) // a tombstone
	m.put(set(4, 4))         // an older Set's late message
	check("late version 4", 0, 1)
	// A resync's snapshot at change 6 of epoch 1 replaces everything but
	// newer changes of that epoch made during the scan; its tombstones
	// expire with TombstoneLife.
	m.put(set(8, 8))
	m.replace([]*ovEntry{{k: ovKey{"api", "other"}, o: ovScaled("other", 1), ver: 6, ep: 1, seq: 6}, set(6, 6)}, 1, 6, 0)
	check("resync at 6 with 8 applied meanwhile", 8, 2)
	m.replace([]*ovEntry{{k: k, ver: 9, ep: 2, seq: 1, gone: true}}, 2, 1, 0)
	check("resync of epoch 2", 0, 1)
	m.replace([]*ovEntry{{k: k, ver: 9, ep: 2, seq: 1, gone: true}}, 2, 1, 9+TombstoneLife.Milliseconds())
	check("resync once the tombstone expired", 0, 0)
	if m.live.Load() != 0 {
		t.Fatalf("live %d", m.live.Load())
	}
}

// BenchmarkOverridesGet: Get from the mirror with no override at all,
// and with 10,000 (found, and missing), from parallel goroutines.
func BenchmarkOverridesGet(b *testing.B) {
	addr := redistest.Start(b).Addr()
	for _, n := range []int{0, 10_000} {
		s := startOverrides(b, client(b, addr), OverrideOptions{Prefix: "n" + strconv.Itoa(n) + ":"})
		for i := range n {
			if err := s.Set(context.Background(), ovScaled("k"+strconv.Itoa(i), 2)); err != nil {
				b.Fatal(err)
			}
		}
		if s.Len() != n {
			b.Fatalf("Len = %d", s.Len())
		}
		for _, c := range []struct{ name, key string }{{"found", "k1234"}, {"missing", "203.0.113.9"}} {
			if n == 0 && c.name == "found" {
				continue
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						s.Get("api", c.key)
					}
				})
			})
		}
	}
}
