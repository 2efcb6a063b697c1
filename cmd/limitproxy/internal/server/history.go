package server

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The dashboard's history (docs/admin-api.md, GET /api/v1/history): the
// last 15 minutes of what the dashboard's charts draw, per policy its
// requests a second by decision, per upstream its requests and 5xx
// answers a second and its latency's p50 and p99, sampled every 2 s from
// the data path's metrics, the counters /metrics exports. A page opened
// now draws them at once instead of from its own first poll on, and so
// does a page that comes back after its browser slowed it down (a tab in
// the background polls once a minute).
//
// Bounded: historyLen samples of each series (float32: 1.8 KB), and a
// series is kept only while one of its samples is not zero; the series
// are at most those of the policies and upstreams /metrics shows, so the
// configuration bounds them, whatever the clients send.

// The history's sampling interval and length: 15 minutes, the page's
// poll interval.
const (
	historyInterval = 2 * time.Second
	historyLen      = 450
)

// seriesKey names one series of the history: a policy's decision rate
// (upstream false, field the decision), or an upstream's "requests",
// "errors" (5xx) rate, or its "p50" or "p99" latency in seconds.
type seriesKey struct {
	upstream    bool
	name, field string
}

// quantile reports whether the series is a latency quantile, which is
// unknown (NaN) when nothing was answered, rather than 0.
func (k seriesKey) quantile() bool { return k.upstream && (k.field == "p50" || k.field == "p99") }

// ring is one series' samples, aligned with history.times.
type ring struct {
	v []float32 // historyLen values
	// last is the time of the latest sample that was neither 0 nor NaN:
	// once it is older than every sample held, the series is dropped.
	last time.Time
}

// upstreamCounts are the cumulative counts of one upstream and status
// code's latency histogram.
type upstreamCounts struct {
	count   float64
	buckets map[float64]float64 // upper bound → cumulative count
}

// history is the dashboard's history. Safe for concurrent use.
type history struct {
	gather prometheus.Gatherer // the data path's metrics

	mu     sync.Mutex
	times  [historyLen]time.Time // a ring: the latest at next-1
	n      int                   // samples held
	next   int
	series map[seriesKey]*ring
	// The counters at the last sample, from which the next one's rates
	// are differenced; primed once there was one.
	primed   bool
	prevAt   time.Time
	prevReqs map[[2]string]float64        // policy, decision
	prevUps  map[[2]string]upstreamCounts // upstream, code
}

func newHistory(gather prometheus.Gatherer) *history {
	return &history{gather: gather, series: map[seriesKey]*ring{}}
}

// run samples every historyInterval until ctx is done; now is the
// process's clock. Its first sample, at once, is the counters' baseline.
func (h *history) run(ctx context.Context, now func() time.Time) {
	t := time.NewTicker(historyInterval)
	defer t.Stop()
	h.sample(now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.sample(now())
		}
	}
}

// sample reads the metrics at now and records the rates and quantiles
// since the previous sample. A series that was not there before counts
// from 0 (the metrics make a series at its first count); a counter that
// went down counts from 0 again.
func (h *history) sample(now time.Time) {
	// What Gather could collect, if it failed in part: these metrics'
	// own collectors do not fail.
	mfs, _ := h.gather.Gather()
	reqs := map[[2]string]float64{}
	ups := map[[2]string]upstreamCounts{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "limitproxy_requests_total":
			for _, m := range mf.GetMetric() {
				// Unmatched and invalid requests have no policy: the
				// page shows them in its table only.
				if p := labelValue(m, "policy"); p != "" {
					reqs[[2]string{p, labelValue(m, "decision")}] = m.GetCounter().GetValue()
				}
			}
		case "limitproxy_upstream_duration_seconds":
			for _, m := range mf.GetMetric() {
				hg := m.GetHistogram()
				c := upstreamCounts{count: float64(hg.GetSampleCount()), buckets: map[float64]float64{}}
				for _, b := range hg.GetBucket() {
					c.buckets[b.GetUpperBound()] = float64(b.GetCumulativeCount())
				}
				c.buckets[math.Inf(1)] = c.count // implied: the exposition's +Inf bucket
				ups[[2]string{labelValue(m, "upstream"), labelValue(m, "code")}] = c
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() { h.primed, h.prevAt, h.prevReqs, h.prevUps = true, now, reqs, ups }()
	dt := now.Sub(h.prevAt).Seconds()
	if !h.primed || dt <= 0 {
		return
	}
	vals := map[seriesKey]float64{}
	for k, v := range reqs {
		vals[seriesKey{name: k[0], field: k[1]}] = increase(v, h.prevReqs[k]) / dt
	}
	type sum struct {
		count, errors float64
		buckets       map[float64]float64
	}
	sums := map[string]*sum{}
	for k, c := range ups {
		s := sums[k[0]]
		if s == nil {
			s = &sum{buckets: map[float64]float64{}}
			sums[k[0]] = s
		}
		p, seen := h.prevUps[k]
		if seen && c.count < p.count {
			p, seen = upstreamCounts{}, false // reset: counts from 0 again
		}
		n := c.count - p.count
		s.count += n
		if strings.HasPrefix(k[1], "5") {
			s.errors += n
		}
		for le, v := range c.buckets {
			s.buckets[le] += v - p.buckets[le]
		}
	}
	for name, s := range sums {
		vals[seriesKey{true, name, "requests"}] = s.count / dt
		vals[seriesKey{true, name, "errors"}] = s.errors / dt
		vals[seriesKey{true, name, "p50"}] = bucketQuantile(0.5, s.buckets)
		vals[seriesKey{true, name, "p99"}] = bucketQuantile(0.99, s.buckets)
	}
	h.recordLocked(now, vals)
}

// recordLocked adds the sample at now: vals for the series it has, 0 (a
// rate) or NaN (a quantile) for those it lacks. A series is made at its
// first value that is neither, with 0 or NaN before; one whose every
// sample held is 0 or NaN is dropped. Requires h.mu held.
func (h *history) recordLocked(now time.Time, vals map[seriesKey]float64) {
	i := h.next
	h.times[i] = now
	h.next = (i + 1) % historyLen
	h.n = min(h.n+1, historyLen)
	oldest := h.times[(h.next-h.n+historyLen)%historyLen]
	for k, v := range vals {
		if _, ok := h.series[k]; ok || v == 0 || math.IsNaN(v) {
			continue
		}
		r := &ring{v: make([]float32, historyLen)}
		if k.quantile() {
			for j := range r.v {
				r.v[j] = float32(math.NaN())
			}
		}
		h.series[k] = r
	}
	for k, r := range h.series {
		v, ok := vals[k]
		switch {
		case !ok && k.quantile():
			v = math.NaN()
		case !ok:
			v = 0
		}
		r.v[i] = float32(v)
		if v != 0 && !math.IsNaN(v) {
			r.last = now
		}
		if r.last.Before(oldest) {
			delete(h.series, k)
		}
	}
}

// increase is how much a counter grew from before to now: now itself if
// it went down (a reset).
func increase(now, before float64) float64 {
	if now < before {
		return now
	}
	return now - before
}

// bucketQuantile is Prometheus's histogram_quantile(q) over buckets
// (upper bound → cumulative count, +Inf included), as the dashboard's
// script computes it from /metrics: linear within the bucket the rank
// falls in, from 0 for the first; the highest finite bound when it falls
// in +Inf; NaN when nothing was counted.
func bucketQuantile(q float64, buckets map[float64]float64) float64 {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 || !math.IsInf(les[len(les)-1], 1) {
		return math.NaN()
	}
	total := buckets[les[len(les)-1]]
	if !(total > 0) {
		return math.NaN()
	}
	rank := q * total
	for i, le := range les {
		n := buckets[le]
		if n < rank {
			continue
		}
		if math.IsInf(le, 1) {
			if i == 0 {
				return math.NaN()
			}
			return les[i-1]
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = les[i-1], buckets[les[i-1]]
		}
		if n == below {
			return le
		}
		return lo + (le-lo)*(rank-below)/(n-below)
	}
	return math.NaN()
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// serveHTTP is GET /api/v1/history: the samples held, oldest first, as
// compact JSON (450 values a series), at now.
func (h *history) serveHTTP(w http.ResponseWriter, now time.Time) {
	b := h.appendJSON(nil, now)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// appendJSON appends the history at now to b:
//
//	{"interval_seconds":2,"span_seconds":900,"now":"…","ages_seconds":[…],
//	 "policies":[{"policy":"login","decisions":{"allowed":[…],…}},…],
//	 "upstreams":[{"upstream":"app","requests":[…],"errors":[…],
//	   "p50_seconds":[…],"p99_seconds":[…]},…]}
//
// Each array has one value per sample, aligned with ages_seconds: a rate
// a second over the interval that ends at the sample, a latency in
// seconds, or null (a quantile of an interval without an answer). A
// decision left out was 0 throughout; policies and upstreams are in
// name order.
func (h *history) appendJSON(b []byte, now time.Time) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	b = slices.Grow(b, (len(h.series)+1)*h.n*6) // about, to grow once or twice
	b = append(b, `{"interval_seconds":`...)
	b = strconv.AppendFloat(b, historyInterval.Seconds(), 'g', -1, 64)
	b = append(b, `,"span_seconds":`...)
	b = strconv.AppendFloat(b, (historyLen * historyInterval).Seconds(), 'g', -1, 64)
	b = append(b, `,"now":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","ages_seconds":[`...)
	first := (h.next - h.n + historyLen) % historyLen
	for j := range h.n {
		if j > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, now.Sub(h.times[(first+j)%historyLen]).Seconds(), 'f', 3, 64)
	}
	b = append(b, ']')
	values := func(b []byte, k seriesKey) []byte {
		r := h.series[k]
		b = append(b, '[')
		for j := range h.n {
			if j > 0 {
				b = append(b, ',')
			}
			switch {
			case r == nil && k.quantile():
				b = append(b, "null"...)
			case r == nil:
				b = append(b, '0')
			default:
				b = appendSample(b, r.v[(first+j)%historyLen])
			}
		}
		return append(b, ']')
	}
	policies, upstreams := map[string][]string{}, map[string]bool{}
	for k := range h.series {
		if k.upstream {
			upstreams[k.name] = true
		} else {
			policies[k.name] = append(policies[k.name], k.field)
		}
	}
	b = append(b, `,"policies":[`...)
	for i, name := range slices.Sorted(maps.Keys(policies)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"policy":`...)
		b = appendString(b, name)
		b = append(b, `,"decisions":{`...)
		for j, d := range slices.Sorted(slices.Values(policies[name])) {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d)
			b = append(b, ':')
			b = values(b, seriesKey{name: name, field: d})
		}
		b = append(b, "}}"...)
	}
	b = append(b, `],"upstreams":[`...)
	for i, name := range slices.Sorted(maps.Keys(upstreams)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"upstream":`...)
		b = appendString(b, name)
		for _, f := range [][2]string{{"requests", "requests"}, {"errors", "errors"}, {"p50", "p50_seconds"}, {"p99", "p99_seconds"}} {
			b = append(b, `,"`+f[1]+`":`...)
			b = values(b, seriesKey{true, name, f[0]})
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendSample appends v to 4 significant digits, or null for NaN.
func appendSample(b []byte, v float32) []byte {
	if math.IsNaN(float64(v)) {
		return append(b, "null"...)
	}
	if f := float64(v); f == math.Trunc(f) && math.Abs(f) < 1e4 {
		return strconv.AppendInt(b, int64(f), 10) // most are 0: the fast way
	}
	return strconv.AppendFloat(b, float64(v), 'g', 4, 32) // 12345 is 1.234e+04, valid JSON
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
