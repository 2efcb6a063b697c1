package rlsload

import (
	"context"
	"slices"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// OpenOptions of one open-loop run.
type OpenOptions struct {
	Rate    float64       // calls per second, evenly spaced
	Dur     time.Duration // the schedule's length
	Timeout time.Duration // per call, from its intended instant
}

// OpenResult of one open-loop run. Latency counts from each call's
// intended instant, not from when it was sent: a late send (the generator
// or the server behind) is latency (no coordinated omission).
type OpenResult struct {
	Calls, Errors   int
	Descriptors     int // descriptors decided (of calls without error)
	P50, P99, Max   time.Duration
	Elapsed         time.Duration // from the first instant to the last answer
	DecisionsPerSec float64       // descriptors decided per second of Elapsed
	FirstError      string
}

// OpenLoop sends calls of stream (cycling through it) through clients
// (in turn: one per connection spreads the calls over them) at o.Rate
// per second for o.Dur, each at its intended instant whatever the
// answers to the ones before, each on a goroutine of its own, and waits
// for the last answer or its timeout. The dispatcher sleeps on a thread
// of its own (proc.Pacer).
func OpenLoop(ctx context.Context, clients []rlsv3.RateLimitServiceClient, stream []*rlsv3.RateLimitRequest, o OpenOptions) OpenResult {
	n := loadgen.Count(o.Dur, o.Rate)
	lat := make([]time.Duration, n)
	var (
		mu  sync.Mutex
		res OpenResult
		wg  sync.WaitGroup
	)
	pacer := proc.NewPacer()
	start := time.Now().Add(10 * time.Millisecond)
	for i := range n {
		at := start.Add(loadgen.Instant(i, o.Rate))
		pacer.SleepUntil(at)
		if ctx.Err() != nil {
			n = i
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithDeadline(ctx, at.Add(o.Timeout))
			resp, err := clients[i%len(clients)].ShouldRateLimit(cctx, stream[i%len(stream)])
			lat[i] = time.Since(at)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Errors++
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
				return
			}
			res.Descriptors += len(resp.Statuses)
		}()
	}
	pacer.Stop()
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Calls = n
	lat = lat[:n]
	if n > 0 {
		slices.Sort(lat)
		res.P50, res.P99, res.Max = stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99), lat[n-1]
		res.DecisionsPerSec = float64(res.Descriptors) / res.Elapsed.Seconds()
	}
	return res
}
