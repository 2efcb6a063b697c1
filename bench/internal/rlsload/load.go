package rlsload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// Options of one run.
type Options struct {
	Calls       int           // calls to send, cycling through the stream
	Concurrency int           // calls in flight at once; 1 keeps the stream's order
	Timeout     time.Duration // per call
}

// Result of one run.
type Result struct {
	Calls, Errors   int
	OK, OverLimit   int // calls, by overall code
	Descriptors     int // descriptors decided (of calls without error)
	Elapsed         time.Duration
	P50, P99, Max   time.Duration
	DecisionsPerSec float64 // descriptors decided per second
	CallsPerSec     float64
	Sequence        []string // per call, in the order sent (concurrency 1) or completed
	FirstError      string
}

// Code is one call's outcome as a line of the sequence: the overall code,
// then each descriptor's ("OVER_LIMIT OK,OVER_LIMIT"), or "ERROR <gRPC
// status code>".
func Code(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return "ERROR " + grpcCode(err)
	}
	parts := make([]string, len(resp.Statuses))
	for i, s := range resp.Statuses {
		parts[i] = s.Code.String()
	}
	return resp.OverallCode.String() + " " + strings.Join(parts, ",")
}

// Run sends o.Calls calls of stream through client, o.Concurrency at a
// time, and measures each.
func Run(ctx context.Context, client rlsv3.RateLimitServiceClient, stream []*rlsv3.RateLimitRequest, o Options) Result {
	o.Concurrency = max(o.Concurrency, 1)
	lat := make([]time.Duration, o.Calls)
	seq := make([]string, o.Calls)
	var (
		next    atomic.Int64
		done    atomic.Int64
		mu      sync.Mutex
		res     Result
		wg      sync.WaitGroup
		ordered = o.Concurrency == 1
	)
	start := time.Now()
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= o.Calls || ctx.Err() != nil {
					return
				}
				req := stream[i%len(stream)]
				cctx, cancel := context.WithTimeout(ctx, o.Timeout)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(cctx, req)
				lat[i] = time.Since(t0)
				cancel()
				c := Code(resp, err)
				slot := i
				if !ordered {
					slot = int(done.Add(1) - 1)
				}
				seq[slot] = c
				mu.Lock()
				res.Calls++
				switch {
				case err != nil:
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
				case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
					res.OverLimit++
					res.Descriptors += len(resp.Statuses)
				default:
					res.OK++
					res.Descriptors += len(resp.Statuses)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	lat = lat[:res.Calls]
	seq = seq[:res.Calls]
	res.Sequence = seq
	if res.Calls > 0 {
		slices.Sort(lat)
		res.P50, res.P99, res.Max = stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99), lat[len(lat)-1]
		res.DecisionsPerSec = float64(res.Descriptors) / res.Elapsed.Seconds()
		res.CallsPerSec = float64(res.Calls) / res.Elapsed.Seconds()
	}
	return res
}

func (r Result) Summary(target string) string {
	s := fmt.Sprintf("target=%s calls=%d ok=%d over_limit=%d errors=%d descriptors=%d elapsed=%s calls_per_sec=%.0f decisions_per_sec=%.0f p50=%s p99=%s max=%s",
		target, r.Calls, r.OK, r.OverLimit, r.Errors, r.Descriptors, r.Elapsed.Round(time.Millisecond), r.CallsPerSec, r.DecisionsPerSec,
		r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond))
	if r.FirstError != "" {
		s += fmt.Sprintf(" first_error=%q", r.FirstError)
	}
	return s
}

func grpcCode(err error) string { return status.Code(err).String() }
