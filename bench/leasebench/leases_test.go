// Package leasebench holds the global tier's benchmark beside exact
// decisions on Redis, run by bench/leases.sh against a redis-server of
// its own. It has no code of its own: the benchmark is its test.
package leasebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// BenchmarkLeases3 and BenchmarkLeases16 decide a fixed window of
// 1,000,000 a minute per key on 10,000 keys drawn with a Zipf law (s =
// 1.1: a few hot keys, a long tail of cold ones), from 64 goroutines
// spread over 3 or 16 instances in this process, each with its own
// Redis client and store on one redis-server: exact (every decision a
// Redis call) and bounded (the global tier, max_share 0.01,
// lease_time 1s, min_lease 8). Reported: the CPU a decision costs this
// process (user and system, Redis excluded), the Redis operations a
// decision costs (a decision or a lease asked for, each one call of the
// store), and the share of decisions made without Redis, of all keys and
// of the 10 hottest (which take about a third of the requests).
func BenchmarkLeases3(b *testing.B)  { benchInstances(b, 3) }
func BenchmarkLeases16(b *testing.B) { benchInstances(b, 16) }

// quiet drops go-redis's own log lines, which would break the benchmark's
// output lines (a renewal may still be on its way when a store closes).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

func benchInstances(b *testing.B, n int) {
	addr := redistest.Start(b).Addr()
	b.Run("exact", func(b *testing.B) { bench(b, addr, n, limiter.Exact) })
	b.Run("bounded", func(b *testing.B) { bench(b, addr, n, limiter.Bounded) })
}

// counting counts the decisions a Redis store is asked for, and of them
// the single requests' (weight 1: not leases) of the 10 hottest keys.
type counting struct {
	limiter.Store
	n, hot atomic.Int64
}

// hottest are the 10 keys the Zipf law draws most.
var hottest = map[string]bool{}

func init() {
	for i := range 10 {
		hottest["client-"+strconv.Itoa(i)] = true
	}
}

func (c *counting) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (limiter.Decision, error) {
	c.n.Add(1)
	if n == 1 && hottest[keys.For(0)] {
		c.hot.Add(1)
	}
	return c.Store.Decide(ctx, limits, keys, now, n)
}

func bench(b *testing.B, addr string, n int, acc limiter.Accuracy) {
	ctx := context.Background()
	fw, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1_000_000, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("bench%d-%v-%d:", n, acc, b.N)
	var lims []*limiter.Limiter
	var calls []*counting
	var tiers []*leases.Store
	for range n {
		c := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}, Timeout: 5 * time.Second})
		defer c.Close()
		rs, err := redisstore.New(c, redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second, OnError: "deny"})
		if err != nil {
			b.Fatal(err)
		}
		cs := &counting{Store: rs}
		calls = append(calls, cs)
		var s limiter.Store = cs
		if acc == limiter.Bounded {
			t := leases.New(cs, leases.Options{})
			tiers = append(tiers, t)
			s = t
		}
		l, err := limiter.New(s, "bench", fw.WithAccuracy(acc))
		if err != nil {
			b.Fatal(err)
		}
		l.Allow(ctx, "warm", time.Now(), 1) // load the script
		lims = append(lims, l)
	}
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for _, c := range calls {
		c.n.Store(0)
		c.hot.Store(0)
	}
	var hotDecisions atomic.Int64
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			l := lims[g%n]
			zipf := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 1)), 1.1, 1, uint64(len(keys)-1))
			for next.Add(1) <= int64(b.N) {
				key := keys[zipf.Uint64()]
				if hottest[key] {
					hotDecisions.Add(1)
				}
				if _, err := l.Allow(ctx, key, time.Now(), 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	var ops, hot int64
	for _, c := range calls {
		ops += c.n.Load()
		hot += c.hot.Load()
	}
	var local uint64
	for _, t := range tiers {
		local += t.Stats().Local
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/decision")
	b.ReportMetric(float64(ops)/float64(b.N), "redis-ops/decision")
	b.ReportMetric(100*float64(local)/float64(b.N), "%local")
	b.ReportMetric(100*(1-float64(hot)/float64(hotDecisions.Load())), "%local-hot10")
}
