package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

func TestBans(t *testing.T) {
	limitertest.RunBans(t, func(t *testing.T) perkey.Bans { return memstore.NewBans(memstore.BanOptions{}) })
}

// TestBansSmall: the suite again with one shard of 64 records.
func TestBansSmall(t *testing.T) {
	limitertest.RunBans(t, func(t *testing.T) perkey.Bans { return memstore.NewBans(memstore.BanOptions{MaxBans: 64}) })
}

var banParams = perkey.BanParams{Duration: time.Minute, Factor: 2, Max: time.Hour, Memory: time.Hour}

// TestBansBound floods a small box: it never holds more than MaxBans
// records, a full shard evicts the record that expires soonest (not the
// newest offender), and expired records go first, uncounted.
func TestBansBound(t *testing.T) {
	ctx := context.Background()
	b := memstore.NewBans(memstore.BanOptions{MaxBans: 64}) // one shard
	long := perkey.BanParams{Duration: time.Hour, Factor: 2, Max: 2 * time.Hour, Memory: 2 * time.Hour}
	// Offence i at t0+i s: record i is banned until t0+1h+i s, and
	// expires at t0+2h+i s.
	for i := range 64 {
		b.Ban(ctx, "p", "k"+strconv.Itoa(i), long, t0.Add(time.Duration(i)*time.Second))
	}
	// k0 offends again once its ban is over: banned 2h, it now expires
	// last.
	b.Ban(ctx, "p", "k0", long, t0.Add(time.Hour))
	at := t0.Add(time.Hour + time.Second)
	for i := range 3 {
		b.Ban(ctx, "p", "new"+strconv.Itoa(i), long, at)
		if n := b.Len(); n != 64 {
			t.Fatalf("after new%d: %d records, want 64", i, n)
		}
	}
	if ev := b.Evictions(); ev != 3 {
		t.Errorf("evictions = %d, want 3", ev)
	}
	for key, want := range map[string]bool{"k0": true, "k1": false, "k2": false, "k3": false, "k4": true, "new0": true, "new2": true} {
		if _, ok := b.Banned("p", key, at); ok != want {
			t.Errorf("Banned(%s) = %v, want %v", key, ok, want)
		}
	}
	// An hour later the first records have expired: new keys take their
	// places without evicting anything.
	later := t0.Add(2*time.Hour + 10*time.Second) // k4 to k10 expired
	for i := range 6 {
		b.Ban(ctx, "p", "later"+strconv.Itoa(i), long, later)
	}
	if ev := b.Evictions(); ev != 3 {
		t.Errorf("evictions = %d after expired records made room, want still 3", ev)
	}
	if n := b.Len(); n > 64 {
		t.Errorf("%d records, above 64", n)
	}
}

// TestBansSweep: Sweep drops exactly the expired records, and an empty
// box answers Banned without its lock.
func TestBansSweep(t *testing.T) {
	ctx := context.Background()
	b := memstore.NewBans(memstore.BanOptions{})
	// Record i is remembered, and expires, until t0+1h+i min.
	for i := range 100 {
		p := banParams
		p.Memory += time.Duration(i) * time.Minute
		b.Ban(ctx, "p", "k"+strconv.Itoa(i), p, t0)
	}
	if n := b.Sweep(t0.Add(time.Hour + 9*time.Minute)); n != 10 {
		t.Errorf("Sweep dropped %d, want 10", n)
	}
	if n := b.Len(); n != 90 {
		t.Errorf("Len = %d, want 90", n)
	}
	if n := b.Sweep(t0.Add(24 * time.Hour)); n != 90 || b.Len() != 0 {
		t.Errorf("Sweep dropped %d, Len %d; want 90, 0", n, b.Len())
	}
	if _, ok := b.Banned("p", "k99", t0); ok {
		t.Error("banned after every record was swept")
	}
}

// BenchmarkBanned is the check every request makes: it must not allocate,
// with no ban at all (the common case) or with many.
func BenchmarkBanned(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{0, 100_000} {
		b.Run("bans="+strconv.Itoa(n), func(b *testing.B) {
			box := memstore.NewBans(memstore.BanOptions{})
			for i := range n {
				box.Ban(ctx, "api", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), banParams, t0)
			}
			// Clients spread over the shards, half of them banned (if
			// any are).
			var keys []string
			for i := range 1024 {
				keys = append(keys, "10."+strconv.Itoa(i%2)+"."+strconv.Itoa(i/512)+"."+strconv.Itoa(i%256))
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					box.Banned("api", keys[i&1023], t0)
					i++
				}
			})
		})
	}
}

// TestBannedAllocs pins BenchmarkBanned's zero allocations.
func TestBannedAllocs(t *testing.T) {
	box := memstore.NewBans(memstore.BanOptions{})
	box.Ban(context.Background(), "api", "10.0.0.1", banParams, t0)
	if n := testing.AllocsPerRun(1000, func() {
		box.Banned("api", "10.0.0.1", t0)
		box.Banned("api", "192.0.2.1", t0)
	}); n != 0 {
		t.Errorf("Banned allocates %v times a call", n)
	}
}
