package limiterbench

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/time/rate"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// The benchmarks measure one decision with its key lookup: the store's hash
// of the key, the shard lock, the table probe and the algorithm's step,
// with the instant passed in (the proxy reads the clock once per request).
// golang.org/x/time/rate is the anchor, measured in the same run: its Allow
// reads the clock itself, its AllowN takes the instant like ours.
//
//	go test -run '^$' -bench . -benchmem ./limiter/memstore

const benchKeys = 1_000_000

func benchLimits(b *testing.B) map[string]limiter.Limit {
	must := func(l limiter.Limit, err error) limiter.Limit {
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	return map[string]limiter.Limit{
		"token_bucket":     must(limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 100, Per: time.Second}, Burst: 100})),
		"fixed_window":     must(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 100, Window: time.Second})),
		"sliding_log":      must(limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 100, Window: time.Second})),
		"sliding_window_1": must(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 100, Window: time.Second, Slots: 1})),
		"sliding_window_6": must(limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 100, Window: 6 * time.Second, Slots: 6})),
		// queue 0: the decision path only (the queue is tested elsewhere).
		"leaky_bucket": must(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 100, Per: time.Second}})),
	}
}

var algorithms = []string{"token_bucket", "fixed_window", "sliding_window_1", "sliding_window_6", "sliding_log", "leaky_bucket"}

var start = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// BenchmarkHotKey: one key, one goroutine; the instant advances 1µs per
// decision, so the limits both admit and reject.
func BenchmarkHotKey(b *testing.B) {
	limits := benchLimits(b)
	for _, name := range algorithms {
		b.Run(name, func(b *testing.B) {
			l, err := limiter.New(memstore.New(memstore.Options{}), "p", limits[name])
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			now := start
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				l.Allow(ctx, "203.0.113.7", now, 1)
			}
		})
	}
	b.Run("x-time-rate/Allow", func(b *testing.B) {
		l := rate.NewLimiter(100, 100)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("x-time-rate/AllowN", func(b *testing.B) {
		l := rate.NewLimiter(100, 100)
		now := start
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			l.AllowN(now, 1)
		}
	})
}

// keyBuf builds client keys ("10.a.b.c") in place, as the proxy builds a
// key from a request: the key is in the cache when the store sees it, and
// no allocation is made. The string it returns is valid until the next call.
type keyBuf [16]byte

func (b *keyBuf) key(i int) string {
	k := append(b[:0], "10."...)
	k = strconv.AppendInt(k, int64(i>>16&255), 10)
	k = append(k, '.')
	k = strconv.AppendInt(k, int64(i>>8&255), 10)
	k = append(k, '.')
	k = strconv.AppendInt(k, int64(i&255), 10)
	return unsafe.String(&k[0], len(k))
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMillionKeys: 1M keys already tracked, decisions on keys chosen at
// random by every goroutine (b.RunParallel). B/key is the heap the store
// holds per key after the first decision on each, measured before timing.
func BenchmarkMillionKeys(b *testing.B) {
	var kb keyBuf
	limits := benchLimits(b)
	ctx := context.Background()
	for _, name := range algorithms {
		b.Run(name, func(b *testing.B) {
			before := heapInUse()
			store := memstore.New(memstore.Options{MaxKeys: 2 * benchKeys})
			l, err := limiter.New(store, "p", limits[name])
			if err != nil {
				b.Fatal(err)
			}
			for i := range benchKeys {
				l.Allow(ctx, kb.key(i), start, 1)
			}
			perKey := float64(heapInUse()-before) / benchKeys
			if n := store.Len(); n != benchKeys {
				b.Fatalf("store tracks %d keys, want %d", n, benchKeys)
			}
			randomKeys(b, func(key string, now time.Time) { l.Allow(ctx, key, now, 1) })
			b.ReportMetric(perKey, "B/key")
			runtime.KeepAlive(store)
		})
	}
	b.Run("x-time-rate-sharded", func(b *testing.B) {
		before := heapInUse()
		m := newRateMap()
		for i := range benchKeys {
			m.allow(strings.Clone(kb.key(i)), start) // the map keeps its keys
		}
		perKey := float64(heapInUse()-before) / benchKeys
		randomKeys(b, func(key string, now time.Time) { m.allow(key, now) })
		b.ReportMetric(perKey, "B/key")
		runtime.KeepAlive(m)
	})
}

// randomKeys times decide on random keys of the million from every
// goroutine, the instant advancing 1µs per decision.
func randomKeys(b *testing.B, decide func(key string, now time.Time)) {
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 0))
		var kb keyBuf
		now := start
		for pb.Next() {
			now = now.Add(time.Microsecond)
			decide(kb.key(rng.IntN(benchKeys)), now)
		}
	})
}

// rateMap is the usual way to key x/time/rate: a sharded map of limiters.
type rateMap struct {
	seed   maphash.Seed
	shards [256]struct {
		mu sync.Mutex
		m  map[string]*rate.Limiter
		_  [40]byte
	}
}

func newRateMap() *rateMap {
	m := &rateMap{seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = map[string]*rate.Limiter{}
	}
	return m
}

func (m *rateMap) allow(key string, now time.Time) bool {
	sh := &m.shards[maphash.String(m.seed, key)>>56]
	sh.mu.Lock()
	l := sh.m[key]
	if l == nil {
		l = rate.NewLimiter(100, 100)
		sh.m[key] = l
	}
	sh.mu.Unlock()
	return l.AllowN(now, 1)
}
