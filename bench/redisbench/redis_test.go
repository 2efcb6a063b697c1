package redisbench

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// BenchmarkRedisC1 and BenchmarkRedisC64 measure decisions against one
// local redis-server, from 1 and from 64 goroutines, for limitproxy's store
// (a token bucket, Redis's TIME) and for go-redis/redis_rate's Allow (GCRA,
// the anchor), on 10,000 keys chosen at random. They report decisions/s and
// the p50 and p99 latency of one decision in µs.
//
//	go test -run '^$' -bench Redis ./limiter/redisstore
func BenchmarkRedisC1(b *testing.B) { benchRedis(b, 1) }

// BenchmarkRedisC64: see BenchmarkRedisC1.
func BenchmarkRedisC64(b *testing.B) { benchRedis(b, 64) }

func benchRedis(b *testing.B, conc int) {
	srv := redistest.Start(b)
	newClient := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 128})
	}
	ctx := context.Background()
	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1000000, Per: time.Second}, Burst: 1000000})
	{
		b.Run("limitproxy", func(b *testing.B) {
			c := newClient()
			defer c.Close()
			s, err := redisstore.New(c, redisstore.Options{Timeout: 5 * time.Second, OnError: "deny"})
			if err != nil {
				b.Fatal(err)
			}
			l, _ := limiter.New(s, "bench", lim)
			run(b, conc, func(key string) error {
				d, err := l.Allow(ctx, key, time.Now(), 1)
				if err == nil && !d.Allowed {
					b.Error("rejected: the store failed")
				}
				return err
			})
		})
		b.Run("redis_rate", func(b *testing.B) {
			c := newClient()
			defer c.Close()
			rl := redis_rate.NewLimiter(c)
			limit := redis_rate.PerSecond(1000000)
			run(b, conc, func(key string) error {
				_, err := rl.Allow(ctx, key, limit)
				return err
			})
		})
	}
}

// run times decide on random keys from conc goroutines, and reports
// decisions/s and latency percentiles.
func run(b *testing.B, conc int, decide func(key string) error) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	decide(keys[0]) // load the script
	var mu sync.Mutex
	var lat []time.Duration
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				t := time.Now()
				if err := decide(keys[rng.IntN(len(keys))]); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
