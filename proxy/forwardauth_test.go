package proxy

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// forwardAuthConfig: the sender 10.0.0.1 is trusted; /limited allows 2 an
// hour per client address, /ban bans its offenders (403), /lb is a leaky
// bucket, /count counts only answers 401 (which the endpoint never sees),
// and nothing else matches.
const forwardAuthConfig = `
[server]
unmatched = "refuse"

[forward_auth]
listen = "127.0.0.1:0"
trusted_senders = ["10.0.0.1"]

[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]

[[policy]]
name = "limited"
upstream = "app"
match = { path_prefix = "/limited" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "ban"
upstream = "app"
match = { path_prefix = "/ban" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"
  [policy.ban]
  duration = "1h"
  status = 403

[[policy]]
name = "lb"
upstream = "app"
match = { path_prefix = "/lb" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "1/s"
  queue = 5
  max_wait = "10s"

[[policy]]
name = "count"
upstream = "app"
match = { path_prefix = "/count" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"
  count = { status = [401] }
`

// newForwardAuth returns the forward-auth endpoint of forwardAuthConfig,
// edited by edit, on the given clock (nil: the handler's default).
func newForwardAuth(t *testing.T, clock func() time.Time, edit func(*config.ForwardAuth)) http.Handler {
	t.Helper()
	return newForwardAuthWith(t, Options{Now: clock}, edit)
}

// newForwardAuthWith is newForwardAuth with the handler's options o.
func newForwardAuthWith(t *testing.T, o Options, edit func(*config.ForwardAuth)) http.Handler {
	t.Helper()
	cfg, err := config.Parse("fa.toml", []byte(forwardAuthConfig))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg.ForwardAuth)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	return New(set, o).ForwardAuth()
}

// ask sends the endpoint one auth request from peer: GET / with the
// header pairs hdr.
func ask(h http.Handler, peer string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://auth.internal/", nil)
	r.RemoteAddr = peer + ":40000"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestForwardAuthDecides: from the trusted sender, each family of
// describing headers (Traefik's and Caddy's X-Forwarded-*, nginx's
// X-Original-*) names the request decided: exactly the limit is allowed
// (2xx with the RateLimit fields), then 429 with Retry-After; another
// client (X-Forwarded-For, walked as the proxy walks it) has its own
// count.
func TestForwardAuthDecides(t *testing.T) {
	for _, family := range [][2]string{{"X-Forwarded-Method", "X-Forwarded-Uri"}, {"X-Original-Method", "X-Original-URI"}} {
		t.Run(family[0], func(t *testing.T) {
			clock := newClock()
			h := newForwardAuth(t, clock.now, nil)
			send := func(client string) *httptest.ResponseRecorder {
				return ask(h, "10.0.0.1", family[0], "POST", family[1], "/limited/x?q=1", "X-Forwarded-Host", "api.example",
					"X-Forwarded-For", "198.51.100.7, "+client)
			}
			for i, want := range []int{200, 200, 429} {
				w := send("203.0.113.1")
				if w.Code != want {
					t.Fatalf("request %d: %d %s, want %d", i+1, w.Code, w.Body, want)
				}
				if w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" {
					t.Errorf("request %d: no RateLimit fields: %v", i+1, w.Header())
				}
				if want == 429 && w.Header().Get("Retry-After") == "" {
					t.Errorf("429 without Retry-After")
				}
			}
			if w := send("203.0.113.2"); w.Code != 200 {
				t.Errorf("another client: %d, want 200", w.Code)
			}
			// Not described: the auth request itself, "/", which no
			// policy matches.
			if w := ask(h, "10.0.0.1"); w.Code != 404 {
				t.Errorf("undescribed: %d, want 404", w.Code)
			}
		})
	}
}

// TestForwardAuthUntrustedSender: a peer outside trusted_senders is
// decided as the request it sent: what it says of another request, and
// its X-Forwarded-For, are ignored (so it cannot spend another client's
// quota, nor escape its own by naming another path or address).
func TestForwardAuthUntrustedSender(t *testing.T) {
	h := newForwardAuth(t, newClock().now, nil)
	for i := range 3 {
		// Describes /limited, but asks for "/": unmatched, 404, and
		// counts nothing.
		if w := ask(h, "127.0.0.1", "X-Forwarded-Uri", "/limited", "X-Original-URI", "/limited", "X-Forwarded-For", "203.0.113.9"); w.Code != 404 {
			t.Fatalf("request %d: %d, want 404 (the described request ignored)", i+1, w.Code)
		}
	}
	// The trusted sender's client 203.0.113.9 has its whole quota.
	for i := range 2 {
		if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/limited", "X-Forwarded-For", "203.0.113.9"); w.Code != 200 {
			t.Fatalf("trusted request %d: %d, want 200", i+1, w.Code)
		}
	}
}

// TestForwardAuthAmbiguous: a describing header given twice, the two
// families disagreeing (a client's own X-Forwarded-Uri passed through
// nginx beside the X-Original-URI nginx sets, an absolute-form URI's host
// and X-Forwarded-Host), or a value that is not one (a URI net/http's
// server would not read on a request line), is refused (400), never
// guessed, so that a client cannot name another request than the one
// the sender received.
func TestForwardAuthAmbiguous(t *testing.T) {
	h := newForwardAuth(t, newClock().now, nil)
	for _, hdr := range [][]string{
		{"X-Forwarded-Uri", "/limited", "X-Forwarded-Uri", "/free"},
		{"X-Original-URI", "/limited", "X-Forwarded-Uri", "/free"},
		{"X-Original-Method", "POST", "X-Forwarded-Method", "GET", "X-Original-URI", "/limited"},
		{"X-Forwarded-Uri", "http://other/limited", "X-Forwarded-Host", "api.example"},
		{"X-Forwarded-Uri", "limited"},
		{"X-Forwarded-Uri", "/limited x"},
		{"X-Forwarded-Uri", "/limited\x7f"},
		{"X-Forwarded-Uri", "/limited", "X-Forwarded-Host", "a.example, b.example"},
		{"X-Forwarded-Uri", "/limited", "X-Forwarded-Method", "GE T"},
		{"X-Forwarded-Uri", ""},
	} {
		if w := ask(h, "10.0.0.1", hdr...); w.Code != 400 {
			t.Errorf("%q: %d, want 400", hdr, w.Code)
		}
	}
	// The same value from both families is one request.
	if w := ask(h, "10.0.0.1", "X-Original-URI", "/limited", "X-Forwarded-Uri", "/limited"); w.Code != 200 {
		t.Errorf("agreeing families: %d, want 200", w.Code)
	}
	// An absolute-form URI is read as the proxy face reads one: its host
	// is the request's, which X-Forwarded-Host may repeat.
	if w := ask(h, "10.0.0.1", "X-Original-URI", "http://API.example./limited", "X-Forwarded-Host", "api.example"); w.Code != 200 {
		t.Errorf("absolute form: %d, want 200 (/limited)", w.Code)
	}
}

// TestForwardAuthCanonical: the described URI is canonicalized as the
// proxy canonicalizes a request line: an encoded or dotted spelling of
// /limited is /limited, and counts against it. But the asking proxy
// forwards the URI as it came, and Werkzeug or Express route dot
// segments as sent: a dotted spelling that, so read, is another
// policy's (or none's) is refused, with deny_status when one is set.
func TestForwardAuthCanonical(t *testing.T) {
	h := newForwardAuth(t, newClock().now, nil)
	for i, uri := range []string{"/%6cimited", "/limited/a/../b"} {
		if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", uri); w.Code != 200 {
			t.Fatalf("%s: %d, want 200 (request %d of 2)", uri, w.Code, i+1)
		}
	}
	if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/limited/./x/"); w.Code != 429 {
		t.Errorf("third spelling: %d, want 429", w.Code)
	}
	for _, uri := range []string{"/free/../limited", "/LIMITED/../limited/", "/limited#x", `/x\..\limited`} {
		if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", uri); w.Code != 400 {
			t.Errorf("%s: %d, want 400", uri, w.Code)
		}
	}
	deny := newForwardAuth(t, newClock().now, func(fa *config.ForwardAuth) { fa.DenyStatus = 403 })
	if w := ask(deny, "10.0.0.1", "X-Original-URI", "/free/../limited"); w.Code != 403 || !strings.Contains(w.Body.String(), `"status":403`) {
		t.Errorf("with deny_status = 403: %d %s, want 403 and a problem whose status is 403", w.Code, w.Body)
	}
}

// TestForwardAuthGRPCRefusal: a gRPC call's refusal is a refusal by its
// status (429), not the proxy's HTTP 200 with a grpc-status, which the
// asking proxy would take for an allow.
func TestForwardAuthGRPCRefusal(t *testing.T) {
	h := newForwardAuth(t, newClock().now, nil)
	var w *httptest.ResponseRecorder
	for range 3 {
		// As an HTTP/2 asker would send it.
		r := httptest.NewRequest("POST", "http://auth.internal/", nil)
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
		r.RemoteAddr = "10.0.0.1:40000"
		r.Header.Set("X-Forwarded-Uri", "/limited/svc/Method")
		r.Header.Set("Content-Type", "application/grpc")
		w = httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
	if w.Code != 429 || w.Header().Get("Grpc-Status") != "" {
		t.Errorf("third gRPC call: %d %v, want 429 without grpc-status", w.Code, w.Header())
	}
}

// TestForwardAuthDenyStatus: deny_status = 403 answers every refusal by a
// limit or a ban 403, still with Retry-After (nginx's recipe copies it);
// other refusals keep their own status.
func TestForwardAuthDenyStatus(t *testing.T) {
	h := newForwardAuth(t, newClock().now, func(fa *config.ForwardAuth) { fa.DenyStatus = 403 })
	var w *httptest.ResponseRecorder
	for range 3 {
		w = ask(h, "10.0.0.1", "X-Forwarded-Uri", "/limited")
	}
	if w.Code != 403 || w.Header().Get("Retry-After") == "" {
		t.Errorf("over the limit: %d %v, want 403 with Retry-After", w.Code, w.Header())
	}
	if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/nothing"); w.Code != 404 {
		t.Errorf("unmatched: %d, want 404", w.Code)
	}
}

// TestForwardAuthCountUnseen: a count limit is charged for every request
// the endpoint allows, since it never sees the answer: exactly its limit
// passes.
func TestForwardAuthCountUnseen(t *testing.T) {
	h := newForwardAuth(t, newClock().now, nil)
	for i, want := range []int{200, 200, 429, 429} {
		if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/count"); w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
}

// TestForwardAuthLeaky: a leaky bucket's delay up to max_wait is waited
// by the endpoint before it answers 200; a longer one is refused (429,
// Retry-After what is over max_wait) and leaves the queue. Four asks at
// once at 1/s: delays 0 and 1 s are waited, 2 s is refused (twice: the
// refused one left the queue).
func TestForwardAuthLeaky(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newForwardAuth(t, nil, func(fa *config.ForwardAuth) { fa.MaxWait = 1500 * time.Millisecond })
		begin := time.Now()
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			answers = map[int]int{}
			retry   []string
			took    time.Duration
		)
		for range 4 {
			wg.Go(func() {
				w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/lb")
				mu.Lock()
				defer mu.Unlock()
				answers[w.Code]++
				if w.Code == 429 {
					retry = append(retry, w.Header().Get("Retry-After"))
				}
				took = max(took, time.Since(begin))
			})
			synctest.Wait() // in the queue in this order
		}
		wg.Wait()
		if answers[200] != 2 || answers[429] != 2 {
			t.Errorf("answers %v, want 2×200 and 2×429", answers)
		}
		for _, r := range retry {
			if r != "1" {
				t.Errorf("Retry-After %q, want 1 (2 s delay, 1.5 s waited at most)", r)
			}
		}
		if took != time.Second {
			t.Errorf("the endpoint waited %v at most, want 1s", took)
		}
	})
}

func TestForwardAuthAllowedAnswerEmpty(t *testing.T) {
	h := newForwardAuth(t, newClock().now, nil)
	w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/limited")
	if w.Code != 200 || w.Body.Len() != 0 || !strings.Contains(w.Header().Get("Cache-Control"), "no-store") {
		t.Errorf("allowed: %d %q %v", w.Code, w.Body, w.Header())
	}
}

// TestForwardAuthRecorded: each ask is counted in
// limitproxy_requests_total and written to the access log as a proxied
// request is, under the same decision names, with the original request's
// method, host and path.
func TestForwardAuthRecorded(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	m := NewMetrics(prometheus.NewRegistry())
	h := newForwardAuthWith(t, Options{Now: newClock().now, Metrics: m, AccessLog: true, AccessLogger: zap.New(core)}, nil)
	for range 3 {
		ask(h, "10.0.0.1", "X-Forwarded-Method", "PUT", "X-Forwarded-Uri", "/limited/a?x=1", "X-Forwarded-Host", "API.example.")
	}
	ask(h, "10.0.0.1", "X-Forwarded-Uri", "/nothing")
	for d, want := range map[Decision]float64{Allowed: 2, Rejected: 1} {
		if n := testutil.ToFloat64(m.requests.WithLabelValues("limited", d.String())); n != want {
			t.Errorf("requests_total{policy=limited, decision=%s} = %v, want %v", d, n, want)
		}
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("", Unmatched.String())); n != 1 {
		t.Errorf("requests_total{decision=unmatched} = %v, want 1", n)
	}
	lines := logs.FilterMessage("request").All()
	if len(lines) != 4 {
		t.Fatalf("%d access-log lines, want 4", len(lines))
	}
	got := lines[2].ContextMap()
	for k, want := range map[string]any{"method": "PUT", "host": "api.example", "path": "/limited/a", "status": int64(429), "policy": "limited", "decision": "rejected"} {
		if got[k] != want {
			t.Errorf("access log %s = %v, want %v (%v)", k, got[k], want, got)
		}
	}
}

// TestForwardAuthDifferential runs the same random traffic (seeded) as
// TestDecideDifferential through the live handler and, described as
// Traefik describes it, through the forward-auth endpoint of a handler of
// its own, on the same instants, and compares every decision, policy and
// refusal status: the endpoint decides as the proxy does. The traffic is
// made what the endpoint cannot tell apart from the live side: every
// answer counts (401 for the count limit, since the endpoint charges
// every request it lets through) and reports no cost (the estimate
// stands), and max_wait is long enough for every queue.
func TestForwardAuthDifferential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 800
		cfg, err := config.Parse("differential.toml", []byte(differentialConfig+"\n[forward_auth]\nlisten = \"127.0.0.1:0\"\ntrusted_senders = [\"10.9.9.9\"]\nmax_wait = \"1h\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(7, 0))
		traffic := randomTraffic(rng, n)
		newSide := func() (*Handler, *observer.ObservedLogs) {
			set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			h := New(set, Options{AccessLog: true, AccessLogger: zap.New(core), Bans: memstore.NewBans(memstore.BanOptions{}), Now: time.Now})
			for _, p := range h.snap.Load().pools {
				for _, tg := range p.targets {
					tg.proxy.Transport = answerTransport{}
				}
			}
			return h, logs
		}
		live, liveLogs := newSide()
		fh, faLogs := newSide()
		fa := fh.ForwardAuth()
		var wg sync.WaitGroup
		at := time.Now()
		for i := range traffic {
			q := &traffic[i]
			q.status, q.cost = 401, -1
			q.header.Del("X-Want-Cost")
			q.header.Set("X-Want-Status", "401")
			at = at.Truncate(time.Millisecond).Add(time.Duration(rng.IntN(150))*time.Millisecond + time.Duration(i+1))
			time.Sleep(time.Until(at))

			r := q.request()
			wg.Go(func() { live.ServeHTTP(httptest.NewRecorder(), r) })
			a := httptest.NewRequest("GET", "http://auth.internal/", nil)
			a.RemoteAddr = "10.9.9.9:5000"
			a.Header = q.header.Clone()
			client, _, _ := strings.Cut(strings.TrimPrefix(q.remote, "["), "]:")
			client, _, _ = strings.Cut(client, ":1000")
			a.Header.Set("X-Forwarded-For", client)
			a.Header.Set("X-Forwarded-Method", q.method)
			a.Header.Set("X-Forwarded-Uri", q.target)
			a.Header.Set("X-Forwarded-Host", "example.com")
			wg.Go(func() { fa.ServeHTTP(httptest.NewRecorder(), a) })
			synctest.Wait()
		}
		time.Sleep(time.Minute) // every queue empties
		wg.Wait()

		type logged struct {
			policy, decision string
			status           int
		}
		read := func(logs *observer.ObservedLogs, forwarded int) map[string]logged {
			out := map[string]logged{}
			for _, e := range logs.FilterMessage("request").All() {
				m := e.ContextMap()
				l := logged{m["policy"].(string), m["decision"].(string), int(m["status"].(int64))}
				if l.status == forwarded {
					l.status = 0
				}
				out[m["path"].(string)] = l
			}
			return out
		}
		lv, fv := read(liveLogs, 401), read(faLogs, 200)
		seen := map[string]int{}
		mismatches := 0
		for i, q := range traffic {
			path, _, _ := strings.Cut(q.target, "?")
			l, ok1 := lv[path]
			f, ok2 := fv[path]
			if !ok1 || !ok2 {
				t.Fatalf("request %d (%s %s): not in both access logs", i, q.method, q.target)
			}
			seen[l.decision]++
			if l != f {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("request %d (%s %s from %s, %v): live %+v, forward auth %+v", i, q.method, q.target, q.remote, q.header, l, f)
				}
			}
		}
		if mismatches > 0 {
			t.Fatalf("%d of %d decisions differ", mismatches, n)
		}
		t.Logf("%d requests: %v", n, seen)
	})
}

// TestForwardAuthSwap: [forward_auth] trusted_senders follows the policy
// set a reload swaps in: a sender removed is no longer believed.
func TestForwardAuthSwap(t *testing.T) {
	compile := func(senders string) *policy.Set {
		src := strings.Replace(forwardAuthConfig, `trusted_senders = ["10.0.0.1"]`, "trusted_senders = ["+senders+"]", 1)
		cfg, err := config.Parse("fa.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	h := New(compile(`"10.0.0.1"`), Options{Now: newClock().now})
	fa := h.ForwardAuth()
	if w := ask(fa, "10.0.0.1", "X-Forwarded-Uri", "/limited"); w.Code != 200 {
		t.Fatalf("trusted: %d, want 200 (/limited)", w.Code)
	}
	h.Swap(compile(`"10.0.0.2"`))
	if w := ask(fa, "10.0.0.1", "X-Forwarded-Uri", "/limited"); w.Code != 404 {
		t.Errorf("after the swap: %d, want 404 (decided as its own \"/\")", w.Code)
	}
}

// TestForwardAuthReplayFields: with access_replay, an ask's line carries
// what `limitproxy replay` needs to decide the described request again:
// its client (behind the trusted sender) and its target.
func TestForwardAuthReplayFields(t *testing.T) {
	cfg, err := config.Parse("fa.toml", []byte("[log]\naccess_replay = true\n"+forwardAuthConfig))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	h := New(set, Options{Now: newClock().now, AccessLog: true, AccessLogger: zap.New(core)}).ForwardAuth()
	ask(h, "10.0.0.1", "X-Forwarded-Uri", "/limited/a?x=1", "X-Forwarded-For", "203.0.113.4")
	lines := logs.FilterMessage("request").All()
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1", len(lines))
	}
	m := lines[0].ContextMap()
	if m["client"] != "203.0.113.4" || m["target"] != "/limited/a?x=1" {
		t.Errorf("replay fields client=%v target=%v, want 203.0.113.4 and /limited/a?x=1", m["client"], m["target"])
	}
}
