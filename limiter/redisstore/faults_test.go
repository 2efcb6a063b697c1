package redisstore

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// These tests lose Redis's data under two instances (each with its own
// client, Run and default Resync of 10 s, so that the periodic check does
// not hide a mirror that fails to follow) while both are checking bans and
// overrides and making changes: a restart without persistence, FLUSHALL,
// FLUSHDB, and the eviction of the change counter.

// faultClient is an instance's client: quick to notice Redis gone.
func faultClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// instance is one limitproxy's penalty box and overrides.
type instance struct {
	bans *Bans
	ovs  *Overrides
}

func startInstance(t *testing.T, addr string) instance {
	c := faultClient(t, addr)
	return instance{
		bans: startBans(t, c, BanOptions{Timeout: time.Second}),
		ovs:  startOverrides(t, c, OverrideOptions{Timeout: time.Second}),
	}
}

// traffic checks, every millisecond until stop, that each instance
// answers "old" banned, "lifted" not, the override "partner" applied and
// "removed" not, and makes offences and overrides of churning keys
// (failing while Redis is down). It returns how many checks went wrong.
func traffic(insts []instance) (stop func() int64) {
	var wrong atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Go(func() {
			ctx := context.Background()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
				now := time.Now()
				_, old := in.bans.Banned("p", "old", now)
				_, lifted := in.bans.Banned("p", "lifted", now)
				_, partner := in.ovs.Get("api", "partner")
				_, removed := in.ovs.Get("api", "removed")
				if !old || lifted || !partner || removed {
					wrong.Add(1)
				}
				if n%20 == 0 {
					in.bans.Ban(ctx, "p", "churn-"+strconv.Itoa(i)+"-"+strconv.Itoa(n), hourBan, now)
					in.ovs.Set(ctx, ovScaled("churn-"+strconv.Itoa(i)+"-"+strconv.Itoa(n%100), 2))
				}
			}
		})
	}
	return func() int64 { close(done); wg.Wait(); return wrong.Load() }
}

// prepare bans "old", bans and lifts "lifted", sets the override
// "partner" and sets and removes "removed", and waits until both
// instances see it all.
func prepare(t *testing.T, insts []instance) {
	t.Helper()
	ctx := context.Background()
	a := insts[0]
	now := time.Now()
	for _, k := range []string{"old", "lifted"} {
		if _, err := a.bans.Ban(ctx, "p", k, hourBan, now); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := a.bans.Lift(ctx, "p", "lifted"); !ok || err != nil {
		t.Fatalf("Lift: %v, %v", ok, err)
	}
	for _, k := range []string{"partner", "removed"} {
		if err := a.ovs.Set(ctx, ovScaled(k, 5)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := a.ovs.Remove(ctx, "api", "removed"); !ok || err != nil {
		t.Fatalf("Remove: %v, %v", ok, err)
	}
	for _, in := range insts {
		waitTrue(t, time.Second, "an instance to see the bans and overrides", func() bool {
			_, old := in.bans.Banned("p", "old", now)
			_, lifted := in.bans.Banned("p", "lifted", now)
			_, partner := in.ovs.Get("api", "partner")
			_, removed := in.ovs.Get("api", "removed")
			return old && !lifted && partner && !removed
		})
	}
}

// waitTrue polls cond every millisecond for at most d, and returns how
// long it took.
func waitTrue(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	begin := time.Now()
	for !cond() {
		if time.Since(begin) > d {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(begin)
}

// onRedis reports whether Redis itself holds what prepare made: "old"
// banned and "lifted" not, "partner" and not "removed" (List reads Redis).
func onRedis(in instance) bool {
	ctx := context.Background()
	bans, err := in.bans.List(ctx, "p", time.Now(), 1000)
	if err != nil {
		return false
	}
	ovs, err := in.ovs.List(ctx, "api", 1000)
	if err != nil {
		return false
	}
	has := func(key string) bool {
		return slices.ContainsFunc(bans, func(b perkey.Ban) bool { return b.Key == key })
	}
	hasOv := func(key string) bool {
		return slices.ContainsFunc(ovs, func(o perkey.Override) bool { return o.Key == key })
	}
	return has("old") && !has("lifted") && hasOv("partner") && !hasOv("removed")
}

// checkNewOffender: a first offence right after the fault is in force on
// the instance that made it at once, and on the other within a second; a
// burst of 20 more from both instances leaves it at level 1; a new
// override applies on both within a second.
func checkNewOffender(t *testing.T, insts []instance, key string) {
	t.Helper()
	ctx := context.Background()
	a, b := insts[0], insts[1]
	now := time.Now()
	ban, err := a.bans.Ban(ctx, "p", key, hourBan, now)
	if err != nil || ban.Level != 1 {
		t.Fatalf("first offence of %s: %+v, %v", key, ban, err)
	}
	if _, ok := a.bans.Banned("p", key, now); !ok {
		t.Fatalf("%s is not banned on the instance that banned it", key)
	}
	t.Logf("%s banned on the other instance after %v", key, waitTrue(t, time.Second, key+" banned on the other instance", func() bool {
		_, ok := b.bans.Banned("p", key, now)
		return ok
	}))
	for i := range 20 {
		if ban, err := insts[i%2].bans.Ban(ctx, "p", key, hourBan, now); err != nil || ban.Level != 1 {
			t.Fatalf("offence %d of %s during its ban: %+v, %v; want level 1", i, key, ban, err)
		}
	}
	if err := a.ovs.Set(ctx, ovScaled(key, 3)); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.ovs.Get("api", key); !ok {
		t.Fatalf("override of %s not applied on the instance that set it", key)
	}
	waitTrue(t, time.Second, "the override of "+key+" on the other instance", func() bool {
		_, ok := b.ovs.Get("api", key)
		return ok
	})
}

// TestFaultRestart: Redis restarted without persistence under two
// instances. Every ban and override in force before is in force on both
// throughout, and back on Redis within 5 s of its restart (the instances
// write back what they hold); a lifted ban stays lifted, a removed
// override removed; a new offender is banned at once on both.
func TestFaultRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	insts := []instance{startInstance(t, srv.Addr()), startInstance(t, srv.Addr())}
	prepare(t, insts)
	stop := traffic(insts)
	time.Sleep(100 * time.Millisecond)
	srv.Kill()
	time.Sleep(300 * time.Millisecond)
	srv.Restart()
	t.Logf("back on Redis %v after its restart", waitTrue(t, 5*time.Second, "the bans and overrides back on Redis", func() bool { return onRedis(insts[1]) }))
	time.Sleep(200 * time.Millisecond)
	if n := stop(); n != 0 {
		t.Errorf("%d checks saw a ban or an override not in force, or a lifted one back", n)
	}
	checkNewOffender(t, insts, "new")
}

// TestFaultFlush: FLUSHALL, FLUSHDB, and the change counters evicted
// (deleted alone, as maxmemory with allkeys-lru may) under two
// instances: a new offender is banned on both at once, and what was in
// force stays in force and is back on Redis within 5 s.
func TestFaultFlush(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault func(ctx context.Context, c *redis.Client, in instance) error
	}{
		{"FLUSHALL", func(ctx context.Context, c *redis.Client, _ instance) error { return c.FlushAll(ctx).Err() }},
		{"FLUSHDB", func(ctx context.Context, c *redis.Client, _ instance) error { return c.FlushDB(ctx).Err() }},
		{"counters evicted", func(ctx context.Context, c *redis.Client, in instance) error {
			return c.Del(ctx, in.bans.seqKey, in.ovs.seqKey).Err()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			insts := []instance{startInstance(t, srv.Addr()), startInstance(t, srv.Addr())}
			prepare(t, insts)
			// More changes, so that the counters stand well above what
			// follows the fault.
			ctx := context.Background()
			for i := range 30 {
				insts[i%2].bans.Ban(ctx, "p", "before-"+strconv.Itoa(i), hourBan, time.Now())
			}
			stop := traffic(insts)
			time.Sleep(50 * time.Millisecond)
			if err := c.fault(ctx, client(t, srv.Addr()), insts[0]); err != nil {
				t.Fatal(err)
			}
			checkNewOffender(t, insts, "new")
			if c.name != "counters evicted" {
				t.Logf("back on Redis %v after the flush", waitTrue(t, 5*time.Second, "the bans and overrides back on Redis", func() bool { return onRedis(insts[1]) }))
			}
			if n := stop(); n != 0 {
				t.Errorf("%d checks saw a ban or an override not in force, or a lifted one back", n)
			}
		})
	}
}
