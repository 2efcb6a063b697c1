package main

import (
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
)

// lateAfter is how far behind its intended instant a request may be
// written before it counts as sent late (its latency counts the delay
// either way).
const lateAfter = time.Millisecond

// measurement sums up the measured part of one run.
type measurement struct {
	requests  int             // requests scheduled in the measured window
	latencies []time.Duration // of those answered 200, from the intended instant to the answer's end, sorted
	failed    int             // not answered, or not 200
	lags      []time.Duration // how far behind its instant each was written, sorted
	late      int             // written more than lateAfter behind its instant
	achieved  float64         // answers 200 per second, from the first one's end to the last one's
	cpu       cpuTimes        // of the processes measured, over the window and the drain
	cpuSpan   time.Duration   // the time between the two readings of cpu
	peakConns int             // connections open at once, at most
	poolFull  int             // requests that waited for a connection, all maxConns being busy
	others    float64         // the share of the machine's CPU time other work took meanwhile (set by the caller)
	steal     float64         // the share the hypervisor took (set by the caller)
}

// summarise computes the measurement of the requests first.. of out, the
// outcomes of a schedule at rate (the requests before first warm up).
func summarise(out []loadgen.Outcome, first int, rate float64) measurement {
	m := measurement{requests: len(out) - first}
	firstEnd, lastEnd := time.Duration(math.MaxInt64), time.Duration(0)
	for i := first; i < len(out); i++ {
		o := out[i]
		at := loadgen.Instant(i, rate)
		if o.Status != http.StatusOK {
			m.failed++
		} else {
			m.latencies = append(m.latencies, o.End-at)
			firstEnd, lastEnd = min(firstEnd, o.End), max(lastEnd, o.End)
		}
		if o.Lag > lateAfter {
			m.late++
		}
		m.lags = append(m.lags, o.Lag)
	}
	slices.Sort(m.latencies)
	slices.Sort(m.lags)
	if n := len(m.latencies); n > 1 && lastEnd > firstEnd {
		m.achieved = float64(n-1) / (lastEnd - firstEnd).Seconds()
	}
	return m
}

// load is one open-loop run against one HTTP server: GET /bench at a
// fixed rate, for warm and then dur, whatever the answers.
type load struct {
	addr      string
	rate      float64
	warm, dur time.Duration
	maxConns  int                      // the pool's limit; at least 1
	cpu       func() (cpuTimes, error) // the measured processes' CPU time; nil for none
}

// cpuTimes are the CPU times of the proxy and of the upstream.
type cpuTimes struct{ proxy, upstream time.Duration }

// run sends the schedule (loadgen.Load.Run, with no timeout: the last
// answers are waited for at most 10 s) and returns the measured part, with
// the measured processes' CPU times read at the first measured request's
// instant and once the answers are in.
func (l load) run() (measurement, error) {
	var cpu0, cpu1 cpuTimes
	var t0 time.Time
	var span time.Duration
	g := loadgen.Load{Addr: l.addr, Path: "/bench", UserAgent: "openloop", Rate: l.rate, Warm: l.warm, Dur: l.dur, MaxConns: l.maxConns,
		OnMeasure: func() (err error) {
			if l.cpu != nil {
				if cpu0, err = l.cpu(); err != nil {
					return err
				}
				t0 = time.Now()
			}
			return nil
		},
		OnDrained: func() (err error) {
			if l.cpu != nil {
				if cpu1, err = l.cpu(); err != nil {
					return err
				}
			}
			span = time.Since(t0)
			return nil
		}}
	res, err := g.Run()
	if err != nil {
		return measurement{}, err
	}
	m := summarise(res.Out, res.First, l.rate)
	m.cpu = cpuTimes{cpu1.proxy - cpu0.proxy, cpu1.upstream - cpu0.upstream}
	m.cpuSpan = span
	m.peakConns = res.PeakConns
	m.poolFull = res.PoolFull
	return m, nil
}
