package proxy

import (
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

const queueConfig = `
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "slow"
upstream = "up"
key = []
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "1/m"
  queue = 5
  max_wait = "1h"
`

const openConfig = `
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100/s"
`

// startLogged runs the configuration src in front of up, with metrics and an access log
// the test reads.
func startLogged(t *testing.T, src string, up *upstream) (h *Handler, addr string, m *Metrics, logs *observer.ObservedLogs) {
	t.Helper()
	cfg, err := config.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	cfg.Upstreams[0].Targets = []*url.URL{target}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	m = NewMetrics(prometheus.NewRegistry())
	h = New(set, Options{Logger: zap.New(core), AccessLog: true, Metrics: m})
	return h, newTestServer(t, h), m, logs
}

// TestCloseQueues: when the drain budget runs out, every request still
// waiting in a queue is answered 503 with Retry-After, logged as such, and
// never forwarded; so is one that arrives later.
func TestCloseQueues(t *testing.T) {
	up := newUpstream(t, nil)
	h, addr, m, logs := startLogged(t, queueConfig, up)
	type result struct {
		status     int
		retryAfter string
	}
	results := make(chan result, 4)
	send := func() {
		resp, err := http.Get("http://" + addr + "/x")
		if err != nil {
			results <- result{}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		results <- result{resp.StatusCode, resp.Header.Get("Retry-After")}
	}
	go send()
	if r := <-results; r.status != 200 {
		t.Fatalf("first request: %d, want 200 (an idle bucket lets it through)", r.status)
	}
	go send()
	go send()
	// Both wait a minute or two: synchronise on the queue's depth (polled:
	// the handler gives no event when a request queues).
	depth := func() float64 {
		var d dto.Metric
		m.queue.WithLabelValues("slow").Write(&d)
		return d.GetGauge().GetValue()
	}
	poll.For(t, 10*time.Second, func() bool { return depth() == 2 }, "the two requests never queued")
	h.CloseQueues()
	for range 2 {
		if r := <-results; r.status != 503 || r.retryAfter != "1" {
			t.Errorf("queued request at the drain deadline: %d, Retry-After %q; want 503, 1", r.status, r.retryAfter)
		}
	}
	go send()
	if r := <-results; r.status != 503 {
		t.Errorf("request queued after CloseQueues: %d, want 503", r.status)
	}
	if n := len(up.seen()); n != 1 {
		t.Errorf("the upstream saw %d requests, want 1", n)
	}
	n503 := 0
	for _, e := range logs.FilterMessage("request").All() {
		if e.ContextMap()["status"] == int64(503) && e.ContextMap()["decision"] == Queued.String() {
			n503++
		}
	}
	if n503 != 3 {
		t.Errorf("%d access-log lines with status 503, decision queued; want 3", n503)
	}
}

// TestCutShortLogged: an upstream that closes its connection in the
// middle of a response body is logged as a 502 with an error, not a 200.
func TestCutShortLogged(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(200)
		w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	})
	_, addr, _, logs := startLogged(t, openConfig, up)
	resp, err := http.Get("http://" + addr + "/x")
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("the client read the whole response; the upstream cut it short")
	}
	// The access-log line comes after the client has its answer.
	poll.For(t, 5*time.Second, func() bool { return logs.FilterMessage("request").Len() > 0 }, "no access-log line")
	e := logs.FilterMessage("request").All()[0]
	if f := e.ContextMap(); f["status"] != int64(502) || f["error"] != "upstream response cut short" || e.Level != zapcore.WarnLevel {
		t.Fatalf("access log: %v at %v; want status 502, error \"upstream response cut short\", at warn", f, e.Level)
	}
}
