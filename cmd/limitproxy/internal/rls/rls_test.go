package rls

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// benchPolicies are two RLS policies as limitproxy import writes them
// (bench/rls/config.yaml's "client" and "user"): one that admits every
// call, one that refuses past 3 a day.
const benchPolicies = `
[rls]
listen = "127.0.0.1:0"
[[policy]]
name = "bench.client"
[policy.match]
rls_domain = "bench"
descriptor = ["client"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 1000000000
window = "1m"
[[policy]]
name = "bench.user"
[policy.match]
rls_domain = "bench"
descriptor = ["user"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 3
window = "24h"
`

// benchService returns a service over benchPolicies on the memory store,
// with the metrics and, when accessLog, an access log to a writer that
// discards.
func benchService(tb testing.TB, accessLog bool) *service {
	tb.Helper()
	cfg, err := config.Parse("bench.toml", []byte(benchPolicies))
	if err != nil {
		tb.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	o := proxy.Options{Metrics: proxy.NewMetrics(prometheus.NewRegistry())}
	if accessLog {
		enc := zap.NewProductionEncoderConfig()
		o.AccessLog = true
		o.Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel))
	}
	return &service{h: proxy.New(set, o), cfg: cfg.RLS, log: zap.NewNop()}
}

// benchCalls are n calls of one descriptor each: clients (OK) and users
// past their limit (OVER_LIMIT), alternately.
func benchCalls(n int) []*rlsv3.RateLimitRequest {
	calls := make([]*rlsv3.RateLimitRequest, n)
	for i := range calls {
		e := &rlscommon.RateLimitDescriptor_Entry{Key: "client", Value: "c" + strconv.Itoa(i)}
		if i%2 == 1 {
			e = &rlscommon.RateLimitDescriptor_Entry{Key: "user", Value: "u" + strconv.Itoa(i%20)}
		}
		calls[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{e}}}}
	}
	return calls
}

// BenchmarkShouldRateLimit is one call of one descriptor, alternately
// allowed and over its limit, on the memory store with the metrics:
// "handler" calls the service's method (the decision, the answer's
// message), "accesslog" the same with the access log on, "grpc" goes
// through a gRPC client and New's server over loopback (both in this
// process: allocations are the two sides').
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./cmd/limitproxy/internal/rls
func BenchmarkShouldRateLimit(b *testing.B) {
	calls := benchCalls(1000)
	for _, v := range []struct {
		name      string
		accessLog bool
	}{{"handler", false}, {"accesslog", true}} {
		b.Run(v.name, func(b *testing.B) {
			s := benchService(b, v.accessLog)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := s.ShouldRateLimit(ctx, calls[i%len(calls)])
				if err != nil || len(resp.Statuses) != 1 {
					b.Fatal(resp, err)
				}
				i++
			}
		})
	}
	b.Run("grpc", func(b *testing.B) {
		s := benchService(b, false)
		srv, err := New(Options{Handler: s.h, Config: s.cfg})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go Serve(srv, ln)
		defer srv.Stop()
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		c := rlsv3.NewRateLimitServiceClient(conn)
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := c.ShouldRateLimit(ctx, calls[i%len(calls)])
			if err != nil || len(resp.Statuses) != 1 {
				b.Fatal(resp, err)
			}
			i++
		}
	})
}

// TestAnswerParts: a call of several descriptors is answered as each
// alone would be (statuses in order, each with its own limit, remaining
// count and reset), the limit message is the same for every answer of a
// limit, and the fields are lower case and sorted.
func TestAnswerParts(t *testing.T) {
	s := benchService(t, false)
	ctx := context.Background()
	d := func(k, v string) *rlscommon.RateLimitDescriptor {
		return &rlscommon.RateLimitDescriptor{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	call := func(ds ...*rlscommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 3 {
		call(d("user", "spent"))
	}
	one := call(d("client", "a"))
	if one.OverallCode != rlsv3.RateLimitResponse_OK || len(one.Statuses) != 1 || one.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1000000000 {
		t.Fatalf("one descriptor: %v", one)
	}
	three := call(d("client", "b"), d("user", "spent"), d("user", "fresh"))
	if three.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(three.Statuses) != 3 {
		t.Fatalf("three descriptors: %v", three)
	}
	want := []struct {
		code      rlsv3.RateLimitResponse_Code
		quota     uint32
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		remaining uint32
	}{
		{rlsv3.RateLimitResponse_OK, 1000000000, rlsv3.RateLimitResponse_RateLimit_MINUTE, 1000000000 - 1},
		{rlsv3.RateLimitResponse_OVER_LIMIT, 3, rlsv3.RateLimitResponse_RateLimit_DAY, 0},
		{rlsv3.RateLimitResponse_OK, 3, rlsv3.RateLimitResponse_RateLimit_DAY, 2},
	}
	for i, w := range want {
		st := three.Statuses[i]
		if st.Code != w.code || st.CurrentLimit.GetRequestsPerUnit() != w.quota || st.CurrentLimit.GetUnit() != w.unit || st.LimitRemaining != w.remaining {
			t.Errorf("status %d: %v, want %+v", i, st, w)
		}
		if r := st.DurationUntilReset.AsDuration(); r <= 0 || r > 24*time.Hour {
			t.Errorf("status %d: reset in %s", i, r)
		}
	}
	if one.Statuses[0].CurrentLimit != three.Statuses[0].CurrentLimit {
		t.Error("the limit's message differs from one answer to the next")
	}
	var names []string
	for _, h := range three.ResponseHeadersToAdd {
		names = append(names, h.Key)
	}
	if len(names) == 0 || !slices.IsSorted(names) || slices.ContainsFunc(names, func(n string) bool { return n != strings.ToLower(n) }) || !slices.Contains(names, "retry-after") {
		t.Errorf("fields %v: want lower case, sorted, with retry-after", names)
	}
}
