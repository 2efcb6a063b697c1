package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// stubTransport answers every request at once, so that a benchmark
// measures only what the proxy in front of it does.
type stubTransport struct{}

func (stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("ok\n")),
		ContentLength: 3, Request: r}, nil
}

// BenchmarkOverhead compares one request through a bare
// httputil.ReverseProxy (as httputil defaults it: a new 32 KiB copy buffer
// per request), the same with limitproxy's buffer pool, and limitproxy's
// handler (match, key, limiter, headers, forward), all over the same stub
// transport. bare-pooled against limitproxy is what a limit costs per
// request; bare against bare-pooled is what pooling saves.
//
//	go test -run '^$' -bench Overhead -benchmem ./proxy
func BenchmarkOverhead(b *testing.B) {
	target, _ := url.Parse("http://upstream.invalid")
	req := httptest.NewRequest("GET", "http://proxy/api/x", nil)
	req.RemoteAddr = "203.0.113.7:40000"
	b.Run("bare", func(b *testing.B) {
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() }, Transport: stubTransport{}}
		b.ReportAllocs()
		for b.Loop() {
			rp.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
	b.Run("bare-pooled", func(b *testing.B) {
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
			Transport: stubTransport{}, BufferPool: newBufferPool()}
		b.ReportAllocs()
		for b.Loop() {
			rp.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
	cfg, err := config.Parse("bench.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]
[[policy]]
name = "bench"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000000000/s"
  burst = 1000000000
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		o    func() Options
	}{
		{"limitproxy", func() Options { return Options{} }},
		// With the metrics registered, and with the access log on (to a
		// writer that discards, so that only the proxy's side is timed).
		{"limitproxy+metrics", func() Options { return Options{Metrics: NewMetrics(prometheus.NewRegistry())} }},
		{"limitproxy+accesslog", func() Options {
			enc := zap.NewProductionEncoderConfig()
			return Options{AccessLog: true, Logger: zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel))}
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			set, _ := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
			h := New(set, v.o())
			for _, p := range h.snap.Load().pools {
				for _, t := range p.targets {
					t.proxy.Transport = stubTransport{}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkRejected is one rejected request (a limit of 1 per hour, spent)
// through the handler, without and with the access log (to a writer that
// discards): what logging every rejection costs the request under a flood,
// through zap's logger (accesslog: the console format's path) and as the
// server logs JSON (accessjson).
//
//	go test -run '^$' -bench Rejected -benchmem ./proxy
func BenchmarkRejected(b *testing.B) {
	req := httptest.NewRequest("GET", "http://proxy/api/x", nil)
	req.RemoteAddr = "203.0.113.7:40000"
	req.Header.Set("User-Agent", "flood/1.0")
	cfg, err := config.Parse("bench.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]
[[policy]]
name = "bench"
upstream = "app"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		o    func() Options
	}{
		{"nolog", func() Options { return Options{} }},
		{"accesslog", func() Options {
			enc := zap.NewProductionEncoderConfig()
			return Options{AccessLog: true, Logger: zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel))}
		}},
		// As the server has it with the JSON format: the line encoded by
		// the handler (writeAccessJSON) and written to the access
		// logger's destination.
		{"accessjson", func() Options {
			enc := zap.NewProductionEncoderConfig()
			enc.EncodeTime = zapcore.ISO8601TimeEncoder
			acc := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel)).Named("access")
			return Options{AccessLog: true, AccessLogger: acc, AccessJSON: io.Discard}
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			set, _ := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
			h := New(set, v.o())
			h.ServeHTTP(httptest.NewRecorder(), req) // spends the limit
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 429 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkAccessLine is one access-log line alone, as the server writes
// it with the JSON format (logAccess to Options.AccessJSON, discarded):
// a 429 of a policy keyed by client IP, the client address in full, its
// key's hash remembered from the line before.
//
//	go test -run '^$' -bench AccessLine -benchmem ./proxy
func BenchmarkAccessLine(b *testing.B) {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	acc := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel)).Named("access")
	h := &Handler{acc: acc, accJSON: io.Discard, hasher: NewKeyHasher(nil), now: time.Now}
	req := httptest.NewRequest("GET", "http://proxy/api/x?y=1", nil)
	req.RemoteAddr = "203.0.113.7:40000"
	req.Header.Set("User-Agent", "flood/1.0")
	p := &policy.Policy{Policy: config.Policy{Name: "bench"}}
	x := logExchange(req, time.Now(), 429, 17)
	b.ReportAllocs()
	for b.Loop() {
		h.logAccess(x, p, Rejected, 0, nil)
	}
}
