package limitertest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// NewBans makes a penalty box for one subtest. It may register cleanups on
// t.
type NewBans func(t *testing.T) perkey.Bans

// RunBans checks a penalty box (perkey.Bans) with exact instants: the
// levels and durations of escalating bans (one level per ban, however many
// offences), the memory window, the
// instant a ban ends, time going backwards, Lift, policies and keys kept
// apart, List, concurrent offences and the expiry of records. Every
// instant and duration is a whole millisecond, the Redis store's
// resolution.
func RunBans(t *testing.T, newBans NewBans) {
	t.Run("Escalation", func(t *testing.T) { runBanEscalation(t, newBans(t)) })
	t.Run("Memory", func(t *testing.T) { runBanMemory(t, newBans(t)) })
	t.Run("Lift", func(t *testing.T) { runBanLift(t, newBans(t)) })
	t.Run("Apart", func(t *testing.T) { runBanApart(t, newBans(t)) })
	t.Run("List", func(t *testing.T) { runBanList(t, newBans(t)) })
	t.Run("Concurrent", func(t *testing.T) { runBanConcurrent(t, newBans(t)) })
	t.Run("Params", func(t *testing.T) { runBanParams(t, newBans(t)) })
}

// banStep is one offence and what it must give.
type banStep struct {
	at    time.Duration // after banT0
	p     perkey.BanParams
	level int64
	since time.Duration // after banT0
	until time.Duration // after banT0
}

// banT0 (t0 in messages) is the instant the suite's ban steps count from.
var banT0 = time.Unix(0, base)

// doubling is the suite's escalating ban: 1m, 2m, 4m, then 5m; an offence
// remembered for an hour.
var doubling = perkey.BanParams{Duration: time.Minute, Factor: 2, Max: 5 * time.Minute, Memory: time.Hour}

// runSteps applies steps to one key and checks each record, and that the
// key is banned just before its Until and not at it.
func runSteps(t *testing.T, bans perkey.Bans, policy, key string, steps []banStep) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		got, err := bans.Ban(ctx, policy, key, s.p, banT0.Add(s.at))
		if err != nil {
			t.Fatalf("step %d: Ban(%v): %v", i, s.at, err)
		}
		want := perkey.Ban{Policy: policy, Key: key, Level: s.level, Since: banT0.Add(s.since), Until: banT0.Add(s.until),
			Expires: banT0.Add(max(s.until, s.since+s.p.Memory))}
		if !sameBan(got, want) {
			t.Fatalf("step %d: Ban(%v) = %s, want %s", i, s.at, show(got), show(want))
		}
		if b, ok := bans.Banned(policy, key, want.Until.Add(-time.Millisecond)); !ok || !sameBan(b, want) {
			t.Fatalf("step %d: Banned just before Until = %s, %v; want %s, true", i, show(b), ok, show(want))
		}
		if b, ok := bans.Banned(policy, key, want.Until); ok {
			t.Fatalf("step %d: Banned at Until = %s, true; want false", i, show(b))
		}
	}
}

func sameBan(a, b perkey.Ban) bool {
	return a.Policy == b.Policy && a.Key == b.Key && a.Level == b.Level && a.Since.Equal(b.Since) && a.Until.Equal(b.Until) &&
		a.Expires.Equal(b.Expires)
}

func show(b perkey.Ban) string {
	if b == (perkey.Ban{}) {
		return "{}"
	}
	at := func(x time.Time) string { return "t0+" + x.Sub(banT0).String() }
	return "{" + b.Policy + " " + b.Key + " level " + strconv.FormatInt(b.Level, 10) + " since " + at(b.Since) +
		" until " + at(b.Until) + " expires " + at(b.Expires) + "}"
}

// runBanEscalation: F = 2 gives D, 2D, 4D, then Max, one level per ban;
// an offence while banned changes nothing (escalation counts bans, not
// offences); a reload to a milder ban applies from the next ban; an
// earlier instant, within the running ban, changes nothing either.
func runBanEscalation(t *testing.T, bans perkey.Bans) {
	mild := perkey.BanParams{Duration: time.Minute, Factor: 1, Max: time.Minute, Memory: time.Hour}
	runSteps(t, bans, "p", "k", []banStep{
		{at: 0, p: doubling, level: 1, since: 0, until: time.Minute},
		{at: 30 * time.Second, p: doubling, level: 1, since: 0, until: time.Minute}, // while banned
		{at: time.Minute, p: doubling, level: 2, since: time.Minute, until: 3 * time.Minute},
		{at: 3 * time.Minute, p: doubling, level: 3, since: 3 * time.Minute, until: 7 * time.Minute},
		{at: 7 * time.Minute, p: doubling, level: 4, since: 7 * time.Minute, until: 12 * time.Minute}, // 8m, capped
		{at: 8 * time.Minute, p: doubling, level: 4, since: 7 * time.Minute, until: 12 * time.Minute}, // while banned
		// Milder parameters (a reload): the level still rises, the ban
		// is the new one's.
		{at: 12 * time.Minute, p: mild, level: 5, since: 12 * time.Minute, until: 13 * time.Minute},
		// Time going backwards, into the running ban: nothing changes.
		{at: 5 * time.Minute, p: doubling, level: 5, since: 12 * time.Minute, until: 13 * time.Minute},
		{at: 13 * time.Minute, p: doubling, level: 6, since: 13 * time.Minute, until: 18 * time.Minute},
	})
	// A huge factor saturates at Max instead of overflowing.
	huge := perkey.BanParams{Duration: time.Second, Factor: 1 << 62, Max: 1000 * time.Hour, Memory: 3000 * time.Hour}
	runSteps(t, bans, "p", "huge", []banStep{
		{at: 0, p: huge, level: 1, since: 0, until: time.Second},
		{at: time.Second, p: huge, level: 2, since: time.Second, until: time.Second + 1000*time.Hour},
		{at: time.Second + 1000*time.Hour, p: huge, level: 3, since: time.Second + 1000*time.Hour, until: time.Second + 2000*time.Hour},
	})
}

// runBanMemory: an offence counts towards the next only within Memory of
// it (less than Memory before), and a record is forgotten at its Expires,
// the later of Until and the latest offence + Memory.
func runBanMemory(t *testing.T, bans perkey.Bans) {
	// Remembered an hour: the offence 1h − 1ms later escalates, the one
	// exactly 1h after its predecessor does not.
	runSteps(t, bans, "p", "a", []banStep{
		{at: 0, p: doubling, level: 1, since: 0, until: time.Minute},
		{at: time.Hour - time.Millisecond, p: doubling, level: 2, since: time.Hour - time.Millisecond, until: time.Hour - time.Millisecond + 2*time.Minute},
		{at: 2*time.Hour - time.Millisecond, p: doubling, level: 1, since: 2*time.Hour - time.Millisecond, until: 2*time.Hour - time.Millisecond + time.Minute},
	})
	// A memory shorter than the ban: offences during the ban change
	// nothing, and the ban after it is a first one again.
	short := perkey.BanParams{Duration: 10 * time.Minute, Factor: 2, Max: time.Hour, Memory: time.Minute}
	runSteps(t, bans, "p", "b", []banStep{
		{at: 0, p: short, level: 1, since: 0, until: 10 * time.Minute},
		{at: 30 * time.Second, p: short, level: 1, since: 0, until: 10 * time.Minute},
		{at: 2 * time.Minute, p: short, level: 1, since: 0, until: 10 * time.Minute},
		{at: 10 * time.Minute, p: short, level: 1, since: 10 * time.Minute, until: 20 * time.Minute},
	})
	// No memory: every ban is a first one.
	none := perkey.BanParams{Duration: time.Minute, Factor: 2, Max: time.Hour}
	runSteps(t, bans, "p", "c", []banStep{
		{at: 0, p: none, level: 1, since: 0, until: time.Minute},
		{at: 0, p: none, level: 1, since: 0, until: time.Minute},
		{at: time.Minute, p: none, level: 1, since: time.Minute, until: 2 * time.Minute},
	})
	// Expiry of a record kept past its ban by its memory: not banned,
	// still counted until its Expires, then gone (and not listed).
	ctx := context.Background()
	mustBan(t, bans, "p", "d", doubling, banT0)
	if _, ok := bans.Banned("p", "d", banT0.Add(30*time.Minute)); ok {
		t.Fatal("banned at banT0+30m, after its 1m ban")
	}
	if l, err := bans.List(ctx, "p", banT0.Add(30*time.Minute), 10); err != nil || slices.ContainsFunc(l, func(b perkey.Ban) bool { return b.Key == "d" }) {
		t.Fatalf("List at banT0+30m = %v, %v; an ended ban is not in force", l, err)
	}
	if b := mustBan(t, bans, "p", "e", doubling, banT0); b.Level != 1 {
		t.Fatalf("first offence of e: %s", show(b))
	}
	if b := mustBan(t, bans, "p", "e", doubling, banT0.Add(time.Hour)); b.Level != 1 {
		t.Fatalf("offence of e at its record's Expires: %s, want level 1 (forgotten)", show(b))
	}
	// A record remembered 2m (a reload since raised the memory to 1h):
	// gone at t0+10m, so the offence then is a first one, although it is
	// within the new memory of the old offence.
	brief := perkey.BanParams{Duration: time.Minute, Factor: 2, Max: time.Hour, Memory: 2 * time.Minute}
	mustBan(t, bans, "p", "f", brief, banT0)
	if b := mustBan(t, bans, "p", "f", doubling, banT0.Add(10*time.Minute)); b.Level != 1 {
		t.Fatalf("offence of f after its record expired: %s, want level 1", show(b))
	}
}

// runBanLift: Lift ends the ban and forgets the level; lifting a key
// without a record reports false.
func runBanLift(t *testing.T, bans perkey.Bans) {
	ctx := context.Background()
	for i := range 3 {
		mustBan(t, bans, "p", "k", doubling, banT0.Add(time.Duration(i)*time.Second))
	}
	mustBan(t, bans, "p", "other", doubling, banT0)
	if ok, err := bans.Lift(ctx, "p", "k"); err != nil || !ok {
		t.Fatalf("Lift = %v, %v; want true", ok, err)
	}
	if b, ok := bans.Banned("p", "k", banT0.Add(3*time.Second)); ok {
		t.Fatalf("banned after Lift: %s", show(b))
	}
	if _, ok := bans.Banned("p", "other", banT0.Add(3*time.Second)); !ok {
		t.Fatal("Lift of k lifted other too")
	}
	if ok, err := bans.Lift(ctx, "p", "k"); err != nil || ok {
		t.Fatalf("second Lift = %v, %v; want false", ok, err)
	}
	if ok, err := bans.Lift(ctx, "p", "never"); err != nil || ok {
		t.Fatalf("Lift of a key never banned = %v, %v; want false", ok, err)
	}
	if b := mustBan(t, bans, "p", "k", doubling, banT0.Add(4*time.Second)); b.Level != 1 || !b.Until.Equal(banT0.Add(4*time.Second+time.Minute)) {
		t.Fatalf("offence after Lift: %s, want level 1 for 1m", show(b))
	}
}

// runBanApart: the same key under two policies, and two keys under one
// policy, have records of their own.
func runBanApart(t *testing.T, bans perkey.Bans) {
	ctx := context.Background()
	mustBan(t, bans, "p1", "k", doubling, banT0)
	mustBan(t, bans, "p1", "k", doubling, banT0.Add(time.Minute))
	if _, ok := bans.Banned("p2", "k", banT0); ok {
		t.Fatal("a ban under p1 bans under p2")
	}
	if _, ok := bans.Banned("p1", "k2", banT0); ok {
		t.Fatal("a ban of k bans k2")
	}
	if b := mustBan(t, bans, "p2", "k", doubling, banT0); b.Level != 1 {
		t.Fatalf("first offence under p2: %s", show(b))
	}
	// Names that a careless encoding would confuse.
	mustBan(t, bans, "a:b", "c", doubling, banT0)
	if _, ok := bans.Banned("a", "b:c", banT0); ok {
		t.Fatal(`("a:b", "c") and ("a", "b:c") share a record`)
	}
	if ok, _ := bans.Lift(ctx, "p2", "k"); !ok {
		t.Fatal("Lift under p2 found nothing")
	}
	if b, ok := bans.Banned("p1", "k", banT0.Add(time.Minute)); !ok || b.Level != 2 {
		t.Fatalf("Lift under p2 changed p1's record: %s, %v", show(b), ok)
	}
}

// runBanList: the bans in force, longest first, per policy or all,
// bounded.
func runBanList(t *testing.T, bans perkey.Bans) {
	ctx := context.Background()
	one := perkey.BanParams{Duration: time.Minute, Factor: 1, Max: time.Minute, Memory: time.Hour}
	mustBan(t, bans, "a", "k1", one, banT0)                     // until 1m
	mustBan(t, bans, "a", "k2", one, banT0.Add(2*time.Minute))  // until 3m
	mustBan(t, bans, "b", "k1", one, banT0.Add(time.Minute))    // until 2m
	mustBan(t, bans, "b", "k0", one, banT0.Add(time.Minute))    // until 2m
	mustBan(t, bans, "a", "old", one, banT0.Add(-time.Hour/2))  // ended at −29m
	mustBan(t, bans, "c", "k", one, banT0.Add(-30*time.Second)) // until 30s
	list := func(policy string, now time.Duration, max int) string {
		t.Helper()
		l, err := bans.List(ctx, policy, banT0.Add(now), max)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, b := range l {
			s = append(s, b.Policy+"/"+b.Key+"@"+b.Until.Sub(banT0).String())
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		policy string
		now    time.Duration
		max    int
		want   string
	}{
		{"", 0, 10, "a/k2@3m0s b/k0@2m0s b/k1@2m0s a/k1@1m0s c/k@30s"},
		{"", 0, 2, "a/k2@3m0s b/k0@2m0s"},
		{"", 0, 0, ""},
		{"a", 0, 10, "a/k2@3m0s a/k1@1m0s"},
		{"b", 0, 1, "b/k0@2m0s"},
		{"", 30 * time.Second, 10, "a/k2@3m0s b/k0@2m0s b/k1@2m0s a/k1@1m0s"},
		{"a", time.Minute, 10, "a/k2@3m0s"},
		{"nobody", 0, 10, ""},
	} {
		if got := list(c.policy, c.now, c.max); got != c.want {
			t.Errorf("List(%q, banT0+%v, %d) = %q, want %q", c.policy, c.now, c.max, got, c.want)
		}
	}
}

// runBanConcurrent: a burst of offences of one key from many goroutines
// at one instant (as when a burst of requests is rejected in one batch,
// before the first ban is seen) bans it once, at level 1, every offence
// answered with that one ban; a burst after the ban ends bans once more,
// at level 2. Banned runs beside them.
func runBanConcurrent(t *testing.T, bans perkey.Bans) {
	for round, at := range []time.Duration{0, time.Minute} {
		got := BanBurst(t, []perkey.Bans{bans}, "p", "k", doubling, banT0.Add(at), 16, 8)
		want := perkey.Ban{Policy: "p", Key: "k", Level: int64(round + 1), Since: banT0.Add(at),
			Until: banT0.Add(at + doubling.DurationAt(int64(round+1))), Expires: banT0.Add(at + doubling.Memory)}
		for _, b := range got {
			if !sameBan(b, want) {
				t.Fatalf("round %d: an offence of the burst gave %s, want %s for each", round, show(b), show(want))
			}
		}
		if b, ok := bans.Banned("p", "k", banT0.Add(at)); !ok || !sameBan(b, want) {
			t.Fatalf("round %d: after the burst: %s, %v; want %s", round, show(b), ok, show(want))
		}
	}
}

// BanBurst makes workers×each offences of key under policy at now at
// once, spread over the stores (several instances of one shared store)
// round robin by worker, calling Banned beside them, and returns what
// each Ban returned. Every offence must succeed.
func BanBurst(t testing.TB, stores []perkey.Bans, policy, key string, p perkey.BanParams, now time.Time, workers, each int) []perkey.Ban {
	t.Helper()
	ctx := context.Background()
	out := make(chan perkey.Ban, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		bans := stores[w%len(stores)]
		wg.Go(func() {
			for range each {
				b, err := bans.Ban(ctx, policy, key, p, now)
				if err != nil {
					t.Error(err)
					return
				}
				out <- b
				bans.Banned(policy, key, now)
			}
		})
	}
	wg.Wait()
	close(out)
	var got []perkey.Ban
	for b := range out {
		got = append(got, b)
	}
	if len(got) != workers*each {
		t.Fatalf("%d of %d offences recorded", len(got), workers*each)
	}
	return got
}

// runBanParams: invalid parameters are refused and record nothing.
func runBanParams(t *testing.T, bans perkey.Bans) {
	for _, p := range []perkey.BanParams{
		{},
		{Duration: time.Minute, Factor: 0, Max: time.Minute},
		{Duration: time.Minute, Factor: 2, Max: time.Second},
		{Duration: time.Minute, Factor: 2, Max: time.Hour, Memory: -1},
		{Duration: -time.Minute, Factor: 2, Max: time.Hour},
	} {
		if b, err := bans.Ban(context.Background(), "p", "k", p, banT0); err == nil {
			t.Errorf("Ban with %+v = %s, nil; want an error", p, show(b))
		}
	}
	if _, ok := bans.Banned("p", "k", banT0); ok {
		t.Error("a refused offence banned the key")
	}
}

func mustBan(t *testing.T, bans perkey.Bans, policy, key string, p perkey.BanParams, now time.Time) perkey.Ban {
	t.Helper()
	b, err := bans.Ban(context.Background(), policy, key, p, now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
