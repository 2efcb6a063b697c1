package redisbench

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// BenchmarkRedisCPU measures what a decision costs limitproxy's own
// process (user and system CPU, in µs, the Redis servers excluded) from 64
// goroutines on 10,000 random keys: the memory store, the Redis store on
// one node, and on a Redis Cluster of three masters, side by side.
func BenchmarkRedisCPU(b *testing.B) {
	ctx := context.Background()
	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1000000, Per: time.Second}, Burst: 1000000})
	bench := func(b *testing.B, s limiter.Store) {
		l, _ := limiter.New(s, "bench", lim)
		var before, after syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		run(b, 64, func(key string) error {
			d, err := l.Allow(ctx, key, time.Now(), 1)
			if err == nil && !d.Allowed {
				b.Error("rejected: the store failed")
			}
			return err
		})
		syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/decision")
	}
	redis := func(b *testing.B, addrs []string) {
		c := redisstore.NewClient(redisstore.ClientOptions{Addrs: addrs, Timeout: 5 * time.Second})
		defer c.Close()
		s, err := redisstore.New(c, redisstore.Options{Timeout: 5 * time.Second, OnError: "deny"})
		if err != nil {
			b.Fatal(err)
		}
		bench(b, s)
	}
	node := redistest.Start(b).Addr()
	cluster := redistest.Cluster(b)
	b.Run("memory", func(b *testing.B) { bench(b, memstore.New(memstore.Options{})) })
	b.Run("node", func(b *testing.B) { redis(b, []string{node}) })
	b.Run("cluster", func(b *testing.B) { redis(b, cluster) })
}
