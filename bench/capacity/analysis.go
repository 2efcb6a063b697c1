package main

import (
	"bufio"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// Kinds of outcome.
const (
	kindGood    = iota // 2xx within the timeout: goodput
	kindShed           // 429 or 503: turned away
	kindTimeout        // no answer within the timeout
	kindError          // any other answer, or no connection
)

// kind classifies o, a request sent at the intended instant at.
func kind(o loadgen.Outcome, at, timeout time.Duration) int {
	switch {
	case o.Status >= 200 && o.Status < 300 && o.End-at <= timeout:
		return kindGood
	case o.TimedOut || o.Status >= 200 && o.Status < 300:
		return kindTimeout
	case o.Status == 429 || o.Status == 503:
		return kindShed
	}
	return kindError
}

// point sums up one window of a run: the requests whose intended
// instants fall in it, and the goodput, the answers that end in it.
type point struct {
	requests int             // scheduled in the window
	offered  float64         // requests per second scheduled
	good     int             // of those, answered 2xx within the timeout
	goodput  float64         // 2xx answers within the timeout that ended in the window, per second
	admitted []time.Duration // latencies of the good ones, from their intended instants; sorted
	shed     []time.Duration // latencies of the 429 and 503 answers; sorted
	// shedSent are the latencies of the 429 and 503 answers from when
	// each request was written, the generator's own lag left out; sorted.
	shedSent []time.Duration
	lag      []time.Duration // how far behind their instants the requests were written; sorted
	timeouts int
	errors   int
	late     int // written more than lateAfter behind their instants
}

// lateAfter is how far behind its intended instant a request may be
// written before it counts as sent late (its latency counts the delay
// either way).
const lateAfter = time.Millisecond

// summarise sums up the window [from, to) of out (a schedule at rate):
// the requests whose intended instants fall in it, and the goodput from
// the answers that end in it, whenever they were sent. (Counted by send
// time instead, the goodput of a run too short for a queue to build up
// would exceed the backend's capacity: requests sent in the window at
// 1.5× the capacity are all answered in time, some after it.)
func summarise(out []loadgen.Outcome, rate float64, from, to, timeout time.Duration) point {
	var p point
	completed := 0
	for i, o := range out {
		if o.End >= from && o.End < to && kind(o, loadgen.Instant(i, rate), timeout) == kindGood {
			completed++
		}
	}
	for i := loadgen.Count(from, rate); i < min(loadgen.Count(to, rate), len(out)); i++ {
		o, at := out[i], loadgen.Instant(i, rate)
		p.requests++
		if o.Lag > lateAfter {
			p.late++
		}
		p.lag = append(p.lag, o.Lag)
		switch kind(o, at, timeout) {
		case kindGood:
			p.good++
			p.admitted = append(p.admitted, o.End-at)
		case kindShed:
			p.shed = append(p.shed, o.End-at)
			p.shedSent = append(p.shedSent, o.End-at-o.Lag)
		case kindTimeout:
			p.timeouts++
		default:
			p.errors++
		}
	}
	slices.Sort(p.admitted)
	slices.Sort(p.shed)
	slices.Sort(p.shedSent)
	slices.Sort(p.lag)
	if s := (to - from).Seconds(); s > 0 {
		p.offered = float64(p.requests) / s
		p.goodput = float64(completed) / s
	}
	return p
}

// perSecond sums up out (a schedule at rate, dur long) second by second:
// the requests sent in each, and the goodput ending in each.
func perSecond(out []loadgen.Outcome, rate float64, dur, timeout time.Duration) []point {
	var ps []point
	for s := time.Duration(0); s < dur; s += time.Second {
		ps = append(ps, summarise(out, rate, s, min(s+time.Second, dur), timeout))
	}
	return ps
}

// quantile returns the p-quantile of sorted latencies in milliseconds,
// and false when there are none.
func quantile(sorted []time.Duration, p float64) (float64, bool) {
	if len(sorted) == 0 {
		return 0, false
	}
	return ms(stats.Percentile(sorted, p)), true
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sample is one reading of limitproxy's metrics during a run, at t from
// the run's start.
type sample struct {
	t                       time.Duration
	limit, inFlight, queued float64
	ok                      bool // the limit was among the metrics
}

// settleTime returns how long after the instant at the learned limit
// settles: the time from at to the first sample from which every later
// one stays within ±band (a fraction) of the median of the samples of
// the last window of the run. It returns that median too, and ok false
// if no sample after at is within the band to the end (or there are no
// samples). Samples must be in time order; those without the limit are
// skipped.
func settleTime(samples []sample, at, window time.Duration, band float64) (settle time.Duration, median float64, ok bool) {
	var s []sample
	for _, x := range samples {
		if x.ok {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return 0, 0, false
	}
	end := s[len(s)-1].t
	var tail []float64
	for _, x := range s {
		if x.t > end-window {
			tail = append(tail, x.limit)
		}
	}
	median = stats.Median(tail)
	lo, hi := median*(1-band), median*(1+band)
	first := -1 // the first sample after at from which all are in the band
	for i, x := range s {
		if x.t < at {
			continue
		}
		in := x.limit >= lo && x.limit <= hi
		switch {
		case !in:
			first = -1
		case first < 0:
			first = i
		}
	}
	if first < 0 {
		return 0, median, false
	}
	return s[first].t - at, median, true
}

// metric is one line of Prometheus text exposition.
type metric struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads Prometheus text exposition (comments skipped; label
// values without escaped quotes, which limitproxy's are).
func parseMetrics(text string) ([]metric, error) {
	var ms []metric
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		m := metric{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			j := strings.IndexByte(line, '}')
			if j < i {
				return nil, fmt.Errorf("metrics: unbalanced braces in %q", line)
			}
			m.name = line[:i]
			for _, kv := range strings.Split(line[i+1:j], ",") {
				k, v, found := strings.Cut(strings.TrimSpace(kv), "=")
				if !found {
					continue
				}
				m.labels[k] = strings.Trim(v, `"`)
			}
			rest = line[j+1:]
		} else {
			m.name, rest, _ = strings.Cut(line, " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		m.value = v
		ms = append(ms, m)
	}
	return ms, sc.Err()
}

// find returns the value of the metric name with the label upstream="app"
// and whether there is one.
func find(ms []metric, name string) (float64, bool) {
	for _, m := range ms {
		if m.name == name && m.labels["upstream"] == "app" {
			return m.value, true
		}
	}
	return math.NaN(), false
}

// byLabel returns the values of the metric name with upstream="app",
// by the value of label.
func byLabel(ms []metric, name, label string) map[string]float64 {
	v := map[string]float64{}
	for _, m := range ms {
		if m.name == name && m.labels["upstream"] == "app" {
			v[m.labels[label]] += m.value
		}
	}
	return v
}
