package main

import (
	"math"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
)

func TestSummarise(t *testing.T) {
	const rate = 10 // instants 0, 100, 200... ms
	ms := time.Millisecond
	timeout := 500 * ms
	out := []loadgen.Outcome{
		{End: 120 * ms, Status: 200},               // 0 ms: before the window
		{End: 160 * ms, Status: 200},               // 100 ms: good, 60 ms
		{End: 210 * ms, Status: 503},               // 200 ms: shed, 10 ms
		{End: 301 * ms, Status: 429, Lag: 2 * ms},  // 300 ms: shed, 1 ms, sent late
		{End: 900 * ms, TimedOut: true},            // 400 ms: timed out
		{End: 1100 * ms, Status: 200},              // 500 ms: 2xx after 600 ms: timed out too
		{End: 620 * ms, Status: 502},               // 600 ms: error
		{End: 700 * ms},                            // 700 ms: no connection: error
		{End: 1000 * ms, Status: 204},              // 800 ms: good, 200 ms
		{End: 950 * ms, Status: 200, Lag: 40 * ms}, // 900 ms: good, 50 ms, sent late
		{End: 1050 * ms, Status: 200},              // 1000 ms: after the window
	}
	p := summarise(out, rate, 100*ms, time.Second, timeout)
	if p.requests != 9 || p.good != 3 || len(p.shed) != 2 || p.timeouts != 2 || p.errors != 2 || p.late != 2 {
		t.Fatalf("requests %d good %d shed %d timeouts %d errors %d late %d; want 9, 3, 2, 2, 2, 2",
			p.requests, p.good, len(p.shed), p.timeouts, p.errors, p.late)
	}
	if p.admitted[0] != 50*ms || p.admitted[1] != 60*ms || p.admitted[2] != 200*ms {
		t.Errorf("admitted %v, want [50ms 60ms 200ms] (sorted, from the intended instants)", p.admitted)
	}
	if p.shed[0] != ms || p.shed[1] != 10*ms {
		t.Errorf("shed %v, want [1ms 10ms]", p.shed)
	}
	// Goodput: the good answers that end in the window, whenever sent:
	// 0 ms's (sent before it, ended at 120 ms), 100 and 900 ms's; not
	// 800 ms's (ended at 1 s).
	if p.offered != 10 || math.Abs(p.goodput-3/0.9) > 1e-9 {
		t.Errorf("offered %v goodput %v, want 10 and %v r/s", p.offered, p.goodput, 3/0.9)
	}
	if v, ok := quantile(p.admitted, 0.99); !ok || v != 200 {
		t.Errorf("p99 of admitted = %v ms, want 200 (nearest rank: the largest of 3)", v)
	}
	if _, ok := quantile(nil, 0.99); ok {
		t.Error("a quantile of no latencies")
	}
	secs := perSecond(out, rate, 1100*ms, timeout)
	if len(secs) != 2 || secs[0].requests != 10 || secs[0].good != 4 || secs[0].goodput != 3 || secs[1].requests != 1 || secs[1].goodput != 20 {
		t.Errorf("per second: %d seconds, %+v", len(secs), secs)
	}
}

func TestSettleTime(t *testing.T) {
	// samples builds samples 1 s apart from t = 0 with the given limits.
	samples := func(v ...float64) []sample {
		var s []sample
		for i, x := range v {
			s = append(s, sample{t: time.Duration(i) * time.Second, limit: x, ok: !math.IsNaN(x)})
		}
		return s
	}
	s := time.Second
	nan := math.NaN()
	for _, c := range []struct {
		name    string
		samples []sample
		at      time.Duration
		settle  time.Duration
		median  float64
		ok      bool
	}{
		// Halved at 2 s; the last 3 samples' median is 10: within ±25%
		// (7.5–12.5) from the one at 5 s.
		{"settles", samples(20, 20, 20, 15, 13, 12, 10, 9), 2 * s, 3 * s, 10, true},
		// Into the band at 3 s, out again at 4 s: the last entry counts.
		{"leaves the band and comes back", samples(20, 20, 20, 11, 14, 10, 10, 10), 2 * s, 3 * s, 10, true},
		// Already in the band at the halving.
		{"never leaves", samples(10, 10, 10, 10, 11, 9, 10, 10), 2 * s, 0, 10, true},
		// The last sample is out of the band.
		{"not settled", samples(20, 20, 10, 10, 10, 10, 10, 20), 2 * s, 0, 10, false},
		// Samples without the metric are skipped (the window's median
		// is that of the samples at 5, 6 and 7 s).
		{"gaps", samples(20, nan, 20, 15, nan, 10, 10, 10), 2 * s, 3 * s, 10, true},
		{"no samples", samples(nan, nan), 0, 0, 0, false},
	} {
		settle, median, ok := settleTime(c.samples, c.at, 3*s, 0.25)
		if settle != c.settle || median != c.median || ok != c.ok {
			t.Errorf("%s: settleTime = %v, %v, %v; want %v, %v, %v", c.name, settle, median, ok, c.settle, c.median, c.ok)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP limitproxy_upstream_concurrency_limit The learned limit.
# TYPE limitproxy_upstream_concurrency_limit gauge
limitproxy_upstream_concurrency_limit{upstream="app"} 12
limitproxy_upstream_concurrency_limit{upstream="other"} 99
limitproxy_upstream_in_flight{upstream="app"} 7.5
limitproxy_upstream_shed_total{reason="queue_timeout",upstream="app"} 3
limitproxy_upstream_shed_total{upstream="app", reason="limit"} 4e+06
limitproxy_upstream_shed_total{reason="limit",upstream="other"} 1
go_goroutines 42
`
	ms, err := parseMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 7 {
		t.Fatalf("%d metrics, want 7", len(ms))
	}
	if v, ok := find(ms, "limitproxy_upstream_concurrency_limit"); !ok || v != 12 {
		t.Errorf("limit = %v, %v; want 12 (upstream app)", v, ok)
	}
	if v, ok := find(ms, "limitproxy_upstream_in_flight"); !ok || v != 7.5 {
		t.Errorf("in flight = %v, %v; want 7.5", v, ok)
	}
	if _, ok := find(ms, "limitproxy_upstream_queue_depth"); ok {
		t.Error("found a metric that is not there")
	}
	if got := byLabel(ms, "limitproxy_upstream_shed_total", "reason"); len(got) != 2 || got["queue_timeout"] != 3 || got["limit"] != 4e6 {
		t.Errorf("sheds by reason = %v", got)
	}
	if ms[6].name != "go_goroutines" || ms[6].value != 42 {
		t.Errorf("unlabelled metric = %+v", ms[6])
	}
	if _, err := parseMetrics("limitproxy_x{upstream=\"app\"}\n"); err == nil {
		t.Error("a line without a value: no error")
	}
}
