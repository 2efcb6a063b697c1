package server

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitproxy/limitproxy/internal/poll"
)

// historyView is GET /api/v1/history's answer.
type historyView struct {
	IntervalSeconds float64   `json:"interval_seconds"`
	SpanSeconds     float64   `json:"span_seconds"`
	Now             time.Time `json:"now"`
	AgesSeconds     []float64 `json:"ages_seconds"`
	Policies        []struct {
		Policy    string
		Decisions map[string][]float64
	}
	Upstreams []struct {
		Upstream   string
		Requests   []float64
		Errors     []float64
		P50Seconds []*float64 `json:"p50_seconds"`
		P99Seconds []*float64 `json:"p99_seconds"`
	}
}

func (v historyView) decisions(policy string) map[string][]float64 {
	for _, p := range v.Policies {
		if p.Policy == policy {
			return p.Decisions
		}
	}
	return nil
}

// decodeHistory parses h's answer at now.
func decodeHistory(t *testing.T, h *history, now time.Time) historyView {
	t.Helper()
	b := h.appendJSON(nil, now)
	var v historyView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	return v
}

// TestHistorySteps samples metrics changed by hand at fixed instants (2 s
// apart, as the server samples them): the first sample is the baseline;
// each next one holds the rates a second since the one before and the
// upstreams' p50 and p99 (histogram_quantile over the buckets' increase,
// null without an answer); only series with a value other than 0 are
// sent; 450 samples are kept, and a series whose samples held are all 0
// is dropped.
func TestHistorySteps(t *testing.T) {
	reg := prometheus.NewRegistry()
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limitproxy_requests_total"}, []string{"policy", "decision"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "limitproxy_upstream_duration_seconds", Buckets: prometheus.DefBuckets},
		[]string{"upstream", "code"})
	reg.MustRegister(reqs, dur)
	h := newHistory(reg)
	t0 := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * historyInterval) }

	reqs.WithLabelValues("login", "allowed").Add(100) // before the baseline: not a rate
	reqs.WithLabelValues("", "unmatched").Add(3)
	h.sample(at(0))
	if v := decodeHistory(t, h, at(0)); len(v.AgesSeconds) != 0 || len(v.Policies) != 0 || len(v.Upstreams) != 0 ||
		v.IntervalSeconds != 2 || v.SpanSeconds != 900 || !v.Now.Equal(at(0)) {
		t.Fatalf("after the baseline: %+v", v)
	}

	// Step 1: login 4 allowed, 6 rejected; app 10 answers of 3 ms
	// (200) and 5 of 200 ms (502).
	reqs.WithLabelValues("login", "allowed").Add(4)
	reqs.WithLabelValues("login", "rejected").Add(6)
	reqs.WithLabelValues("", "unmatched").Add(5)
	for range 10 {
		dur.WithLabelValues("app", "200").Observe(0.003)
	}
	for range 5 {
		dur.WithLabelValues("app", "502").Observe(0.2)
	}
	h.sample(at(1))
	// Step 2: nothing.
	h.sample(at(2))
	v := decodeHistory(t, h, at(2).Add(500*time.Millisecond))
	if want := []float64{2.5, 0.5}; !floatsEqual(v.AgesSeconds, want) {
		t.Errorf("ages %v, want %v", v.AgesSeconds, want)
	}
	if len(v.Policies) != 1 || len(v.Policies[0].Decisions) != 2 {
		t.Fatalf("policies %+v, want login's allowed and rejected", v.Policies)
	}
	d := v.decisions("login")
	if !floatsEqual(d["allowed"], []float64{2, 0}) || !floatsEqual(d["rejected"], []float64{3, 0}) {
		t.Errorf("login %v, want allowed [2 0], rejected [3 0]", d)
	}
	if len(v.Upstreams) != 1 {
		t.Fatalf("upstreams %+v", v.Upstreams)
	}
	u := v.Upstreams[0]
	// p50: rank 7.5 of 15 in the first bucket (0–5 ms): 3.75 ms. p99:
	// rank 14.85 in 100–250 ms, which holds 5 above 10: 100 + 150×4.85/5.
	if u.Upstream != "app" || !floatsEqual(u.Requests, []float64{7.5, 0}) || !floatsEqual(u.Errors, []float64{2.5, 0}) ||
		u.P50Seconds[0] == nil || *u.P50Seconds[0] != 0.00375 || u.P99Seconds[0] == nil || *u.P99Seconds[0] != 0.2455 ||
		u.P50Seconds[1] != nil || u.P99Seconds[1] != nil {
		t.Errorf("app %+v (p50 %v, p99 %v)", u, u.P50Seconds, u.P99Seconds)
	}

	// 450 samples more of nothing but a search rejection at the 300th:
	// 450 kept; login's and app's series have left with their last
	// value other than 0, search's is there, 0 but for one sample.
	for i := 3; i < 453; i++ {
		if i == 300 {
			reqs.WithLabelValues("search", "rejected").Add(1)
		}
		h.sample(at(i))
	}
	v = decodeHistory(t, h, at(452))
	if len(v.AgesSeconds) != historyLen || v.AgesSeconds[0] != 898 || v.AgesSeconds[historyLen-1] != 0 {
		t.Errorf("%d ages from %v to %v, want 450 from 898 to 0", len(v.AgesSeconds), v.AgesSeconds[0], v.AgesSeconds[len(v.AgesSeconds)-1])
	}
	if len(v.Upstreams) != 0 || len(v.Policies) != 1 || v.Policies[0].Policy != "search" {
		t.Fatalf("policies %+v, upstreams %+v: want search's alone", v.Policies, v.Upstreams)
	}
	s := v.decisions("search")["rejected"]
	for i, x := range s {
		if want := map[bool]float64{true: 0.5}[i == 300-3]; x != want {
			t.Errorf("search rejected[%d] = %v, want %v", i, x, want)
		}
	}
	if len(h.series) != 1 {
		t.Errorf("%d series held, want 1", len(h.series))
	}
}

func floatsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

// TestBucketQuantile: histogram_quantile's cases, as the dashboard's
// script computes them.
func TestBucketQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		q       float64
		buckets map[float64]float64
		want    float64
	}{
		{0.5, map[float64]float64{0.005: 0, 0.01: 50, 0.025: 100, inf: 100}, 0.01},
		{0.99, map[float64]float64{0.005: 0, 0.01: 50, 0.025: 100, inf: 100}, 0.0247},
		{0.5, map[float64]float64{0.005: 10, inf: 10}, 0.0025},
		{0.99, map[float64]float64{0.005: 1, 0.01: 1, inf: 10}, 0.01}, // in +Inf: the highest finite bound
		{0.5, map[float64]float64{0.005: 0, inf: 0}, math.NaN()},      // nothing counted
		{0.5, map[float64]float64{0.005: 3}, math.NaN()},              // no +Inf
		{0.5, nil, math.NaN()},
	} {
		got := bucketQuantile(c.q, c.buckets)
		if math.IsNaN(c.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-c.want) > 1e-12 {
			t.Errorf("bucketQuantile(%v, %v) = %v, want %v", c.q, c.buckets, got, c.want)
		}
	}
}

// TestHistoryServed: a real server samples its metrics every 2 s from
// its start; GET /api/v1/history, behind the token like the rest of
// /api/, soon shows the rejections and the upstream's answers sent.
func TestHistoryServed(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) {
		text := configText(up, 2, "1/h", "")
		os.WriteFile(path, []byte(strings.Replace(text, "[admin]\n", "[admin]\ntoken_env = \"LIMITPROXY_TEST_TOKEN\"\n", 1)), 0o644)
	})
	r.send(t, "/x", 2, 200)
	r.send(t, "/x", 3, 429)
	resp, err := http.Get(r.admin + "/api/v1/history")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/history without the token: %d, want 401", resp.StatusCode)
	}
	var v historyView
	sum := func(xs []float64) (s float64) {
		for _, x := range xs {
			s += x
		}
		return s
	}
	// Up to two intervals (and a loaded machine's slack) until the
	// sample after the requests.
	poll.For(t, 10*time.Second, func() bool {
		if s := adminJSON(t, "GET", r.admin+"/api/v1/history", &v); s != 200 {
			t.Fatalf("GET /api/v1/history: %d", s)
		}
		return sum(v.decisions("all")["rejected"]) > 0
	}, "no rejection in the history")
	// The rates a second, times the interval each covers (2 s, give or
	// take a busy machine's late tick), are the requests sent.
	d := v.decisions("all")
	if got := sum(d["rejected"]) * 2; got < 2.1 || got > 3.9 {
		t.Errorf("rejected: %v a second: %v requests, want 3", d["rejected"], got)
	}
	if got := sum(d["allowed"]) * 2; got < 1.4 || got > 2.6 {
		t.Errorf("allowed: %v a second: %v requests, want 2", d["allowed"], got)
	}
	if len(v.Upstreams) != 1 || v.Upstreams[0].Upstream != "app" || sum(v.Upstreams[0].Requests)*2 < 1.4 {
		t.Errorf("upstreams %+v, want app's 2 answers", v.Upstreams)
	}
	for i, age := range v.AgesSeconds {
		if age < 0 || age > 30 || i > 0 && age >= v.AgesSeconds[i-1] {
			t.Errorf("ages %v: want recent, oldest first", v.AgesSeconds)
			break
		}
	}
}

// BenchmarkHistory: one sample and one answer of a history of 20
// policies with 3 decisions each and 5 upstreams with 2 codes, full.
func BenchmarkHistory(b *testing.B) {
	reg := prometheus.NewRegistry()
	m := proxyMetricsForBench(reg)
	h := newHistory(reg)
	t0 := time.Now()
	for i := range historyLen + 1 {
		m(i)
		h.sample(t0.Add(time.Duration(i) * historyInterval))
	}
	now := t0.Add(historyLen * historyInterval)
	b.Run("sample", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			m(i)
			now = now.Add(historyInterval)
			h.sample(now)
		}
	})
	b.Run("answer", func(b *testing.B) {
		var n int
		for b.Loop() {
			n = len(h.appendJSON(nil, now))
		}
		b.ReportMetric(float64(n), "bytes")
	})
}

// proxyMetricsForBench registers the metrics history reads and returns a
// function that counts one interval's traffic.
func proxyMetricsForBench(reg *prometheus.Registry) func(i int) {
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limitproxy_requests_total"}, []string{"policy", "decision"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "limitproxy_upstream_duration_seconds", Buckets: prometheus.DefBuckets},
		[]string{"upstream", "code"})
	reg.MustRegister(reqs, dur)
	return func(i int) {
		for p := range 20 {
			for _, d := range []string{"allowed", "rejected", "queued"} {
				reqs.WithLabelValues("policy-"+strconv.Itoa(p), d).Add(float64(i % 7))
			}
		}
		for u := range 5 {
			dur.WithLabelValues("up-"+strconv.Itoa(u), "200").Observe(float64(i%10) / 100)
			dur.WithLabelValues("up-"+strconv.Itoa(u), "502").Observe(0.2)
		}
	}
}
