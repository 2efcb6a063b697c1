package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitproxy/limitproxy/internal/redistest"
)

// rlsPolicies are RLS policies of domain "edge", one per algorithm, each
// admitting 3 calls an hour per user (the leaky bucket: one at once and
// two queued 500ms apart), a shadow one, and an HTTP catch-all policy
// that must never match an RLS call.
const rlsPolicies = `
[[policy]]
name = "tb"
match = { rls_domain = "edge", descriptor = ["alg=tb", "user"] }
key = ["descriptor:user"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "3/h"
  burst = 3
[[policy]]
name = "fw"
match = { rls_domain = "edge", descriptor = ["alg=fw", "user"] }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
[[policy]]
name = "sl"
match = { rls_domain = "edge", descriptor = ["alg=sl", "user"] }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 3
  window = "1h"
[[policy]]
name = "sw"
match = { rls_domain = "edge", descriptor = ["alg=sw", "user"] }
  [[policy.limits]]
  algorithm = "sliding_window"
  limit = 3
  window = "1h"
  slots = 6
[[policy]]
name = "lb"
match = { rls_domain = "edge", descriptor = ["alg=lb", "user"] }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "2/s"
  queue = 2
  max_wait = "5s"
[[policy]]
name = "shadow"
mode = "shadow"
match = { rls_domain = "edge", descriptor = ["alg=shadow*", "user"] }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
[[policy]]
name = "ban"
match = { rls_domain = "edge", descriptor = ["alg=ban", "user"] }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
  [policy.ban]
  duration = "2h"
  status = 403
[[policy]]
name = "http"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`

// rlsServer starts a server with rlsPolicies on store (the TOML of a
// [store] table), [rls] on, and returns a client of its RLS, its admin
// URL and its logs.
func rlsServer(t *testing.T, store string) (rlsv3.RateLimitServiceClient, string, *syncWriter) {
	t.Helper()
	c, admin, logs, _, _ := rlsServerWith(t, store, "")
	return c, admin, logs
}

// rlsServerWith is rlsServer with more [rls] keys, also returning the
// RLS listener's address and the configuration file's path.
func rlsServerWith(t testing.TB, store, rls string) (rlsv3.RateLimitServiceClient, string, *syncWriter, string, string) {
	t.Helper()
	text := `[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[log]
level = "debug"
[rls]
listen = "127.0.0.1:0"
max_message_bytes = 4096
` + rls + "\n" + store + `
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9"]
` + rlsPolicies
	path := filepath.Join(t.TempDir(), "rls.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncWriter{w: new(bytes.Buffer)}
	l, _ := serveFile(t, path, logs)
	if l.RLS == nil {
		t.Fatal("no RLS listener")
	}
	cc, err := grpc.NewClient(l.RLS.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc), "http://" + l.Admin.String(), logs, l.RLS.String(), path
}

// desc is a descriptor of the given key=value entries.
func desc(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func ask(t testing.TB, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, req)
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}

// TestRLSAlgorithms asks the RLS about each algorithm's policy on the
// memory store and on Redis: three calls of a user pass with the limit,
// what remains and the reset in each status and the RateLimit fields,
// the fourth is OVER_LIMIT with Retry-After; another user is counted
// apart; a shadow policy never says OVER_LIMIT; unknown domains and
// descriptors no policy matches are OK without a limit; hits_addend is
// the cost.
func TestRLSAlgorithms(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	for name, store := range map[string]string{
		"memory": "",
		"redis":  fmt.Sprintf("[store]\nbackend = \"redis\"\n[store.redis]\naddrs = [%q]\ntimeout = \"2s\"\n", rs.Addr()),
	} {
		t.Run(name, func(t *testing.T) {
			c, admin, logs := rlsServer(t, store)
			for _, alg := range []string{"tb", "fw", "sl", "sw"} {
				for i := range 4 {
					resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg="+alg, "user=alice")}})
					if err != nil {
						t.Fatalf("%s call %d: %v", alg, i, err)
					}
					st := resp.Statuses[0]
					if i < 3 {
						if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK {
							t.Fatalf("%s call %d: %v", alg, i, resp)
						}
						if st.LimitRemaining != uint32(2-i) {
							t.Errorf("%s call %d: limit_remaining %d, want %d", alg, i, st.LimitRemaining, 2-i)
						}
						if header(resp, "retry-after") != "" {
							t.Errorf("%s call %d: Retry-After on OK", alg, i)
						}
					} else {
						if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
							t.Fatalf("%s call %d: %v", alg, i, resp)
						}
						if header(resp, "retry-after") == "" {
							t.Errorf("%s over limit: no Retry-After in %v", alg, resp.ResponseHeadersToAdd)
						}
					}
					if cl := st.CurrentLimit; cl == nil || cl.Name != alg || cl.RequestsPerUnit != 3 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
						t.Errorf("%s call %d: current_limit %v", alg, i, cl)
					}
					if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > 2*time.Hour { // a sliding window resets a slot past its window
						t.Errorf("%s call %d: duration_until_reset %v", alg, i, d)
					}
					if !strings.Contains(header(resp, "ratelimit-policy"), `"`+alg+`"`) || header(resp, "ratelimit") == "" {
						t.Errorf("%s call %d: RateLimit fields %v", alg, i, resp.ResponseHeadersToAdd)
					}
				}
				resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg="+alg, "user=bob")}})
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Errorf("%s: another user: %v %v", alg, resp, err)
				}
			}

			// The leaky bucket: one at once, two held in the queue until
			// their turn (500ms apart), the others OVER_LIMIT at once.
			var wg sync.WaitGroup
			codes := make([]rlsv3.RateLimitResponse_Code, 5)
			start := time.Now()
			for i := range codes {
				wg.Go(func() {
					resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=lb", "user=alice")}})
					if err != nil {
						t.Errorf("lb: %v", err)
						return
					}
					codes[i] = resp.OverallCode
				})
			}
			wg.Wait()
			ok := 0
			for _, code := range codes {
				if code == rlsv3.RateLimitResponse_OK {
					ok++
				}
			}
			// The queue's spacing makes the last admitted answer wait
			// 1s; a loaded machine only makes it later.
			if took := time.Since(start); ok != 3 || took < 900*time.Millisecond {
				t.Errorf("lb: %v in %v; want 3 OK, the last after ~1s", codes, took)
			}

			// hits_addend is the cost: 2 of the 3, then 2 more is over;
			// a descriptor's own hits_addend overrides the call's.
			resp, _ := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=fw", "user=carol")}})
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 {
				t.Errorf("hits_addend 2: %v", resp)
			}
			d := desc("alg=fw", "user=carol")
			d.HitsAddend = wrapperspb.UInt64(2)
			resp, _ = ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d}})
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("descriptor hits_addend 2 over 1 remaining: %v", resp)
			}

			// Several descriptors: each decided; one over makes the call over.
			resp, _ = ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
				desc("alg=tb", "user=dave"), desc("alg=fw", "user=alice"), desc("alg=none"),
			}})
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 3 ||
				resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
				resp.Statuses[2].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[2].CurrentLimit != nil {
				t.Errorf("three descriptors: %v", resp)
			}

			// Shadow: over its limit, still OK, counted as shadow_rejected.
			for i := range 3 {
				resp, _ := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=shadow-x", "user=alice")}})
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Errorf("shadow call %d: %v", i, resp)
				}
			}

			// A cost no limit can ever admit: OVER_LIMIT, never an error.
			// (A leaky bucket lets an idle key's first request of any cost
			// through, then holds the key for its cost: docs/algorithms.md.)
			resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1000, Descriptors: []*rlscommon.RateLimitDescriptor{
				desc("alg=tb", "user=zed"), desc("alg=fw", "user=zed"), desc("alg=sl", "user=zed"), desc("alg=sw", "user=zed"),
			}})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("hits_addend 1000: %v %v", resp, err)
			}
			for i, st := range resp.GetStatuses() {
				if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Errorf("hits_addend 1000, descriptor %d: %v", i, st)
				}
			}

			// The penalty box: over the limit bans for 2h (the 403 of the
			// proxy path is OVER_LIMIT here, with Retry-After all the same).
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT} {
				resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=ban", "user=mallory")}})
				if err != nil || resp.OverallCode != want {
					t.Fatalf("ban call %d: %v %v", i, resp, err)
				}
				if ra := header(resp, "retry-after"); i > 0 && (ra == "" || len(ra) < 4) {
					t.Errorf("ban call %d: Retry-After %q, want the ban's ~7200", i, ra)
				}
			}

			// A descriptor's own hits_addend of 0 checks without counting
			// (nor banning, nor queueing).
			check := func(alg, user string) *rlsv3.RateLimitResponse {
				d := desc("alg="+alg, "user="+user)
				d.HitsAddend = wrapperspb.UInt64(0)
				resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatalf("check-only %s: %v", alg, err)
				}
				return resp
			}
			for _, alg := range []string{"tb", "fw", "sl", "sw", "lb"} {
				for range 5 {
					if resp := check(alg, "paul"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
						t.Errorf("check-only %s: %v", alg, resp)
					}
				}
			}
			for i := range 3 {
				resp, _ := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=fw", "user=paul")}})
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Errorf("fw call %d after five checks: %v", i, resp)
				}
			}
			if resp := check("fw", "paul"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("check-only of a spent limit: %v", resp)
			}
			ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=ban", "user=trent")}})
			if resp := check("ban", "trent"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("check-only of a spent limit with a ban: %v", resp)
			}
			// Over, and the offence that begins the ban (a check began
			// none): "rejected", not "banned" (the count below).
			ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=ban", "user=trent")}})

			// A per-key override through the admin API: the key is the
			// descriptor: values, here the user alone.
			put, _ := http.NewRequest("PUT", admin+"/api/v1/policies/tb/overrides/victor", strings.NewReader(`{"scale": 2}`))
			put.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(put); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("PUT override: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
			for i := range 7 {
				resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=victor")}})
				want := rlsv3.RateLimitResponse_OK
				if i == 6 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if err != nil || resp.OverallCode != want || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 6 {
					t.Fatalf("overridden call %d: %v %v, want %v of 6", i, resp, err, want)
				}
			}

			// An unknown domain: OK, no limit.
			resp, err = ask(t, c, &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=alice")}})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
				t.Errorf("unknown domain: %v %v", resp, err)
			}

			metrics := get(t, admin+"/metrics")
			for _, want := range []string{
				`limitproxy_requests_total{decision="rejected",policy="tb"} 3`,
				`limitproxy_requests_total{decision="shadow_rejected",policy="shadow"} 2`,
				`limitproxy_requests_total{decision="queued",policy="lb"} 2`,
				`limitproxy_requests_total{decision="unmatched",policy=""} 2`,
				`limitproxy_requests_total{decision="banned",policy="ban"} 1`,
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			if top := get(t, admin+"/api/v1/top?policy=tb"); !strings.Contains(top, `"tb"`) {
				t.Errorf("top offenders: %s", top)
			}
			if l := logs.String(); !strings.Contains(l, `"method":"RLS","host":"edge","path":"alg=tb,user=alice","status":429`) {
				t.Errorf("no access log line of a rejected descriptor in:\n%s", l)
			}
		})
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRLSBadInput sends what the RLS refuses: each is INVALID_ARGUMENT
// (or RESOURCE_EXHAUSTED for a message above max_message_bytes), nothing
// is counted, and the server goes on answering.
func TestRLSBadInput(t *testing.T) {
	t.Parallel()
	c, _, _ := rlsServer(t, "")
	huge := desc("alg=tb", "user=eve")
	huge.HitsAddend = wrapperspb.UInt64(1 << 62)
	many := make([]*rlscommon.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = desc("alg=tb", "user=eve")
	}
	negative := desc("alg=tb", "user=eve")
	negative.IsNegativeHits = true
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=eve")}}, codes.InvalidArgument},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument},
		{"empty descriptor", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=eve"), {}}}, codes.InvalidArgument},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("=x")}}, codes.InvalidArgument},
		{"huge hits_addend", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{huge}}, codes.InvalidArgument},
		{"call hits_addend", &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1001, Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=eve")}}, codes.InvalidArgument},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{negative}}, codes.InvalidArgument},
		{"65 descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument},
		{"17 entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc(strings.Split(strings.Repeat("k=v,", 17)[:4*17-1], ",")...)}}, codes.InvalidArgument},
		{"5000-byte message", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user="+strings.Repeat("x", 5000))}}, codes.ResourceExhausted},
	} {
		_, err := ask(t, c, tc.req)
		if grpcstatus.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	// Nothing of the refused calls was counted: eve has her 3.
	for i := range 3 {
		resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=eve")}})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d after the refusals: %v %v", i, resp, err)
		}
	}
}

// TestRLSRedisOutage kills Redis under the RLS: with on_error = "deny"
// every descriptor is OVER_LIMIT, with "allow" OK, as on the proxy path;
// and the answers come at once (the breaker), not after a timeout each.
func TestRLSRedisOutage(t *testing.T) {
	t.Parallel()
	for _, onError := range []string{"deny", "allow"} {
		t.Run(onError, func(t *testing.T) {
			rs := redistest.Start(t)
			c, _, _ := rlsServer(t, fmt.Sprintf("[store]\nbackend = \"redis\"\n[store.redis]\naddrs = [%q]\ntimeout = \"200ms\"\non_error = %q\n", rs.Addr(), onError))
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=fw", "user=alice")}}
			if resp, err := ask(t, c, req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil {
				t.Fatalf("before the outage: %v %v", resp, err)
			}
			rs.Kill()
			want := rlsv3.RateLimitResponse_OVER_LIMIT
			if onError == "allow" {
				want = rlsv3.RateLimitResponse_OK
			}
			start := time.Now()
			for i := range 20 {
				resp, err := ask(t, c, req)
				if err != nil || resp.OverallCode != want {
					t.Fatalf("call %d in the outage: %v %v, want %v", i, resp, err, want)
				}
			}
			// 20 calls at the 200ms timeout each would take 4s; the
			// breaker answers without Redis after the first failures.
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("20 calls in the outage took %v", took)
			}
		})
	}
}

// TestRLSHangingClient opens calls on a raw HTTP/2 connection and never
// sends their messages: past max_concurrent_streams a call is refused
// (RST_STREAM REFUSED_STREAM), the hung ones hold nothing from other
// clients, and pinging more than once in 10 s is answered with GOAWAY
// ENHANCE_YOUR_CALM.
func TestRLSHangingClient(t *testing.T) {
	t.Parallel()
	c, _, _, addr, _ := rlsServerWith(t, "", "max_concurrent_streams = 4")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for id := uint32(1); id <= 11; id += 2 { // six calls
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
			{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
	}
	refused := map[uint32]bool{}
	for len(refused) < 2 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %v refused: %v", refused, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("stream %d reset with %v", f.StreamID, f.ErrCode)
			}
			refused[f.StreamID] = true
		}
	}
	if !refused[9] || !refused[11] {
		t.Errorf("refused %v; want the fifth and sixth calls (9, 11)", refused)
	}
	// Another client is answered while those hang.
	resp, err := ask(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=frank")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a call beside the hung ones: %v %v", resp, err)
	}
	// A ping flood: GOAWAY ENHANCE_YOUR_CALM.
	for i := range 5 {
		fr.WritePing(false, [8]byte{byte(i)})
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY after a ping flood: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			return
		}
	}
}

// TestRLSTLS serves the RLS over TLS from cert_file and key_file: a client
// that trusts the certificate is answered, a plaintext one is not.
func TestRLSTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPEM, keyPEM, cert := selfSigned(t, 1)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	plain, _, _, addr, _ := rlsServerWith(t, "", fmt.Sprintf("cert_file = %q\nkey_file = %q", certFile, keyFile))
	if _, err := ask(t, plain, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=tls")}}); err == nil {
		t.Error("a plaintext client was answered by the TLS listener")
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := ask(t, rlsv3.NewRateLimitServiceClient(cc), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=tls")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil {
		t.Fatalf("over TLS: %v %v", resp, err)
	}
}

// TestRLSMutualTLS: with client_ca_file, a client without a certificate
// signed by it is refused; one with is answered.
func TestRLSMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPEM, keyPEM, serverCert := selfSigned(t, 1)
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	// The client's CA, and a client certificate it signs.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(10), Subject: pkix.Name{CommonName: "envoy ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	caCert, _ := x509.ParseCertificate(caDER)
	clKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	clTmpl := &x509.Certificate{SerialNumber: big.NewInt(11), Subject: pkix.Name{CommonName: "envoy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	clDER, _ := x509.CreateCertificate(rand.Reader, clTmpl, caCert, &clKey.PublicKey, caKey)

	_, _, _, addr, _ := rlsServerWith(t, "", fmt.Sprintf("cert_file = %q\nkey_file = %q\nclient_ca_file = %q", certFile, keyFile, caFile))
	pool := x509.NewCertPool()
	pool.AddCert(serverCert)
	call := func(certs []tls.Certificate) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: certs})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		resp, err := ask(t, rlsv3.NewRateLimitServiceClient(cc), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=mtls")}})
		if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("with a client certificate: %v", resp)
		}
		return err
	}
	if err := call(nil); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if err := call([]tls.Certificate{{Certificate: [][]byte{clDER}, PrivateKey: clKey}}); err != nil {
		t.Errorf("a client with a certificate the CA signed: %v", err)
	}
}

// TestRLSHealth: the RLS listener answers gRPC health checks.
func TestRLSHealth(t *testing.T) {
	t.Parallel()
	_, _, _, addr, _ := rlsServerWith(t, "", "")
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v", svc, resp, err)
		}
	}
}

// TestRLSReload: RLS policies reload like the others: a limit changed in
// the file is what the next call is measured against, and its counters
// survive.
func TestRLSReload(t *testing.T) {
	t.Parallel()
	c, admin, _, _, path := rlsServerWith(t, "", "")
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=fw", "user=oscar")}}
	for range 3 {
		ask(t, c, req)
	}
	if resp, _ := ask(t, c, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th call: %v", resp)
	}
	b, _ := os.ReadFile(path)
	text := strings.Replace(string(b), "match = { rls_domain = \"edge\", descriptor = [\"alg=fw\", \"user\"] }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 3", "match = { rls_domain = \"edge\", descriptor = [\"alg=fw\", \"user\"] }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 5", 1)
	if text == string(b) {
		t.Fatal("the fw policy was not found in the file")
	}
	os.WriteFile(path, []byte(text), 0o644)
	resp, err := http.Post(admin+"/api/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d", resp.StatusCode)
	}
	// 3 counted of 5: two more pass, the third is over.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := ask(t, c, req)
		if err != nil || resp.OverallCode != want || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
			t.Errorf("call %d after the reload: %v %v, want %v of 5", i, resp, err, want)
		}
	}
}

// BenchmarkRLS measures one ShouldRateLimit call of one descriptor over
// loopback on the memory store, a client key per call (a token bucket
// that never runs out), from parallel clients.
func BenchmarkRLS(b *testing.B) {
	c, _, _, _, _ := rlsServerWith(b, "", "")
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			user := "user=" + strconv.FormatInt(n.Add(1), 10)
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", user)}})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
		}
	})
}

// TestRLSTopOffendersWithoutHeaders: with response_headers = "none" an
// answer carries no RateLimit fields, so none are built, and the top
// offenders are still recorded: a user past the limit is listed with
// its rejections, as with the fields.
func TestRLSTopOffendersWithoutHeaders(t *testing.T) {
	for _, headers := range []string{"none", "envoy", "ratelimit"} {
		t.Run(headers, func(t *testing.T) {
			c, admin, _, _, _ := rlsServerWith(t, "", `response_headers = "`+headers+`"`)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=tb", "user=mallory")}}
			for i := range 5 {
				resp, err := ask(t, c, req)
				want := rlsv3.RateLimitResponse_OK
				if i >= 3 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if err != nil || resp.OverallCode != want {
					t.Fatalf("call %d: %v %v, want %v", i, resp, err, want)
				}
				if got := resp.GetResponseHeadersToAdd(); (len(got) > 0) != (headers != "none") {
					t.Errorf("call %d: response headers %v with response_headers = %q", i, got, headers)
				}
			}
			top := get(t, admin+"/api/v1/top?policy=tb")
			if !strings.Contains(top, `"total_rejected": 2`) {
				t.Errorf("top offenders lack mallory's 2 rejections:\n%s", top)
			}
		})
	}
}
