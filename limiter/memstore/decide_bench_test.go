package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// BenchmarkDecideHot is one decision on a key already tracked: the hot
// path (hash, shard lock, table probe, step), which eviction never
// touches.
func BenchmarkDecideHot(b *testing.B) {
	store := memstore.New(memstore.Options{MaxKeys: 1000})
	l := tokenBucket(b, store, "hot", 100, limiter.Rate{N: 100, Per: time.Second})
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		l.Allow(ctx, "client", now, 1)
	}
}

// BenchmarkDecideFull is one decision on a new key in a full store: each
// one evicts an entry that is not fresh (the flood case).
func BenchmarkDecideFull(b *testing.B) {
	const maxKeys = 10_000
	store := memstore.New(memstore.Options{MaxKeys: maxKeys})
	l := tokenBucket(b, store, "full", 10, limiter.Rate{N: 10, Per: time.Hour})
	ctx := context.Background()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "junk-" + strconv.Itoa(i)
	}
	for i := range maxKeys {
		l.Allow(ctx, keys[i%len(keys)], t0, 1)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		l.Allow(ctx, keys[i%len(keys)], t0.Add(time.Duration(i)*time.Microsecond), 1)
	}
}
