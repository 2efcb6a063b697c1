package proxy

// Edge cases of the limits that read the answer (charges after the fact,
// bans, response-code limits) and the penalty box. Each test is named for
// the behaviour that must hold; its comment describes the defect it was
// written to show, since fixed (or, where the fix was to the
// configuration's checks or the documentation, the documented bound it
// now checks). A failure is a defect, not a flaky test.

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// countingUpstream counts the requests it gets and answers status.
type countingUpstream struct {
	n      atomic.Int64
	status int
}

func (u *countingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.n.Add(1)
	io.Copy(io.Discard, r.Body)
	w.WriteHeader(u.status)
}

const shadowBanCfg = `
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "p"
upstream = "app"
key = ["header:X-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1h"
  [policy.ban]
  duration = "1h"
  escalation = 2
  mode = "shadow"
`

// TestShadowBanKeepsEnforcedLimit: an enforced policy with a
// ban in shadow mode. docs/metrics.md says a shadow_banned request is
// "forwarded (and decided by its limits as usual)", and
// docs/configuration.md says a shadow ban "never refuses". So the
// enforced limit of 2 must still hold: the upstream sees 2 requests.
// Instead, once the key is shadow-banned, handler.go's
// `case decision == ShadowBanned` forwards every request whatever the
// limit decided: the key becomes unlimited for as long as the shadow ban
// lasts, and each of those requests is a new offence (escalating).
func TestShadowBanKeepsEnforcedLimit(t *testing.T) {
	up := &countingUpstream{status: 200}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	b := newRLBackend(t, "memory", time.Now)
	e := newRLEnv(t, shadowBanCfg, srv.URL, b, time.Now)
	var codes []int
	for range 10 {
		code, _ := send(t, "GET", e.addr+"/x", "X-Key", "k")
		codes = append(codes, code)
	}
	t.Logf("statuses: %v", codes)
	if n := up.n.Load(); n != 2 {
		t.Errorf("the upstream got %d requests through an enforced limit of 2 (ban in shadow mode); want 2", n)
	}
	list, _ := b.bans.List(context.Background(), "p", time.Now(), 10)
	if len(list) != 1 || list[0].Level != 1 {
		var lv int64
		if len(list) == 1 {
			lv = list[0].Level
		}
		t.Errorf("shadow ban level %d after one run over the limit; an enforced ban would be at level 1 (banned requests never reach the limits)", lv)
	}
	if n := testutil.ToFloat64(e.m.bans.WithLabelValues("p")); n != 1 {
		t.Errorf("limitproxy_bans_total %v; in enforce mode the same traffic makes 1 ban", n)
	}
}

// rawPost sends one HTTP/1.1 POST with a 4-byte body over a raw socket,
// header lines added, and returns the final (non-1xx) status.
func rawPost(t *testing.T, addr, path string, header ...string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "POST " + path + " HTTP/1.1\r\nHost: example.com\r\n"
	for _, h := range header {
		req += h + "\r\n"
	}
	req += "Content-Length: 4\r\nConnection: close\r\n\r\nabcd"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 200 {
			return resp.StatusCode
		}
	}
}

// TestCountLimitCountsAfterExpectContinue: docs/response-limits.md says a
// count limit is charged when the answer "matches — the status the client
// received". A client that sends "Expect: 100-continue" gets the header
// forwarded (it is not hop-by-hop); the upstream, reading the body,
// answers "100 Continue" first; ReverseProxy relays it through
// Got1xxResponse → recorder.WriteHeader(100), and recorder.head keeps the
// *first* status written (handler.go WriteHeader). settle then sees 100,
// which never matches {status = [401]}: no failure is ever counted, and
// the client guesses passwords without limit.
func TestCountLimitCountsAfterExpectContinue(t *testing.T) {
	up := &countingUpstream{status: 401}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	b := newRLBackend(t, "memory", time.Now)
	e := newRLEnv(t, loginConfig, srv.URL, b, time.Now)
	addr := strings.TrimPrefix(e.addr, "http://")
	// Control: the same requests without Expect are limited to 3.
	for range 5 {
		rawPost(t, addr, "/login", "X-Forwarded-For: 10.9.9.1")
	}
	if n := up.n.Swap(0); n != 3 {
		t.Fatalf("control without Expect: %d failures reached the upstream, want 3", n)
	}
	var codes []int
	for range 10 {
		codes = append(codes, rawPost(t, addr, "/login", "X-Forwarded-For: 10.9.9.9", "Expect: 100-continue"))
	}
	t.Logf("statuses: %v", codes)
	if n := up.n.Load(); n > 3 {
		t.Errorf("%d failed logins reached the upstream through a limit of 3 failures (Expect: 100-continue); want 3", n)
	}
	if n := testutil.ToFloat64(e.m.charges.WithLabelValues("login", chargeNotCounted)); n != 0 { // the control's were all counted
		t.Errorf("%v 401 answers were recorded as not_counted", n)
	}
}

// TestCountLimitCountsAfterEarlyHints: the same with an upstream that sends
// 103 Early Hints before its 401 (as many frameworks and CDNs do): the
// first status the recorder saw is 103, so no 401 is ever counted. (A
// request without a body goes through syncTransport, which skips 1xx.)
func TestCountLimitCountsAfterEarlyHints(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	b := newRLBackend(t, "memory", time.Now)
	e := newRLEnv(t, loginConfig, srv.URL, b, time.Now)
	var codes []int
	for range 10 {
		// A login form has a body: such requests go through
		// http.Transport (transport.go), which relays 1xx.
		code, _ := sendBody(t, e.addr+"/login", "user=a&password=b", "X-Forwarded-For", "10.9.9.8")
		codes = append(codes, code)
	}
	t.Logf("statuses: %v", codes)
	if got := n.Load(); got > 3 {
		t.Errorf("%d failures (401 after 103 Early Hints) reached the upstream through a limit of 3; want 3", got)
	}
}

const offenceCfg = `
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "p"
upstream = "app"
key = ["header:X-Key"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 1
  [policy.ban]
  duration = "1h"
`

// TestOffenceRetryAfterIsTheBans: the request whose rejection bans the key
// is answered with the limit's Retry-After (1 s), although the key is now
// banned for an hour. A client that honours Retry-After comes back after
// 1 s and is refused for the hour (docs/responses.md promises Retry-After
// "until the ban ends" for banned keys; the offending 429 contradicts it).
func TestOffenceRetryAfterIsTheBans(t *testing.T) {
	up := &countingUpstream{status: 200}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	clock := newClock()
	b := newRLBackend(t, "memory", clock.now)
	e := newRLEnv(t, offenceCfg, srv.URL, b, clock.now)
	if code, _ := send(t, "GET", e.addr+"/x", "X-Key", "k"); code != 200 {
		t.Fatalf("first: %d", code)
	}
	code, h := send(t, "GET", e.addr+"/x", "X-Key", "k")
	ra, _ := strconv.Atoi(h.Get("Retry-After"))
	t.Logf("offending request: %d Retry-After %q", code, h.Get("Retry-After"))
	clock.advance(time.Duration(ra) * time.Second)
	code2, h2 := send(t, "GET", e.addr+"/x", "X-Key", "k")
	t.Logf("after waiting Retry-After: %d Retry-After %q", code2, h2.Get("Retry-After"))
	if code2 != 200 {
		t.Errorf("a client that waited the Retry-After (%ds) it was given is refused (%d, Retry-After %s): the offending answer's Retry-After should be the ban's", ra, code2, h2.Get("Retry-After"))
	}
}

const countOnErrorCfg = `
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "login"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"     # an ordinary limit beside the count
  rate = "1/h"
  burst = 2
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1h"
  count = { status = [401] }
`

// TestCountLimitFollowsOnError: with the Redis store unreachable, a
// policy with a count limit must follow on_error like every store call
// (docs/redis.md; "deny" here:
// reject). decideDeferred checks a count limit with PeekN, and the Redis
// store's Peek "returns Redis's error rather than following on_error";
// ServeHTTP then logs "limiter failed; request forwarded" and forwards.
// Every limit of the policy is skipped, the ordinary token bucket too, and
// nothing is charged anywhere; the breaker never opens (Peek bypasses it),
// so every request waits the Redis timeout first.
func TestCountLimitFollowsOnError(t *testing.T) {
	t.Parallel()
	for _, onError := range []string{"deny", "local"} {
		t.Run(onError, func(t *testing.T) {
			t.Parallel()
			up := &countingUpstream{status: 401}
			srv := httptest.NewServer(up)
			t.Cleanup(srv.Close)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			dead := ln.Addr().String()
			ln.Close() // nothing listens there: Redis is down
			c := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
			t.Cleanup(func() { c.Close() })
			rs, err := redisstore.New(c, redisstore.Options{Timeout: 100 * time.Millisecond, OnError: onError, Fallback: memstore.New(memstore.Options{})})
			if err != nil {
				t.Fatal(err)
			}
			bk := &rlBackend{store: rs, bans: memstore.NewBans(memstore.BanOptions{})}
			e := newRLEnv(t, countOnErrorCfg, srv.URL, bk, time.Now)
			var codes []int
			for range 6 {
				code, _ := send(t, "POST", e.addr+"/login")
				codes = append(codes, code)
			}
			t.Logf("on_error %s, Redis down: statuses %v", onError, codes)
			want := int64(0) // deny
			if onError == "local" {
				want = 2 // the local store enforces both limits of 2
			}
			if n := up.n.Load(); n != want {
				t.Errorf("on_error = %q with Redis down: %d requests reached the upstream, want %d", onError, n, want)
			}
		})
	}
}

const debtCfg = `
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "login"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/10s"
  burst = 2
  count = { status = [401] }
`

// TestChargeDebtCappedAtOneBurst: docs/response-limits.md says "The limit
// is never undercounted: a charge that finds the limit spent still counts
// (a token bucket goes into debt and refills from below zero)". Ten
// failures in flight at once (all checked before any is charged) must
// leave the bucket at 2 − 10 = −8 tokens, so the next failure fits only
// after 90 s. limiter/driver/charge.go caps the debt at one burst (−2): after
// 31 s the key is let through again, 8 of the 10 failures forgotten.
func TestChargeDebtCappedAtOneBurst(t *testing.T) {
	const inFlight = 10
	var arrived atomic.Int64
	release := make(chan struct{})
	var up atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.Add(1)
		if arrived.Add(1) == inFlight {
			close(release)
		}
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(401)
	}))
	t.Cleanup(srv.Close)
	clock := newClock()
	b := newRLBackend(t, "memory", clock.now)
	e := newRLEnv(t, debtCfg, srv.URL, b, clock.now)
	done := make(chan int, inFlight)
	for range inFlight {
		go func() {
			req, _ := http.NewRequest("POST", e.addr+"/login", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range inFlight {
		if c := <-done; c != 401 {
			t.Fatalf("an in-flight failure got %d, want 401", c)
		}
	}
	waitFor(t, "the ten failures to be charged", func() bool {
		return testutil.ToFloat64(e.m.charges.WithLabelValues("login", chargeCharged)) == inFlight
	})
	// The debt is capped at one burst (docs/response-limits.md): from -2
	// tokens, the next failure fits after 30 s, not 90.
	clock.advance(29 * time.Second)
	if code, _ := send(t, "POST", e.addr+"/login"); code != 429 {
		t.Errorf("29 s after 10 charged failures against 1/10s burst 2: %d, want 429 (the capped debt of 2 needs 30 s)", code)
	}
	clock.advance(2 * time.Second)
	if code, _ := send(t, "POST", e.addr+"/login"); code == 429 {
		t.Errorf("31 s after: 429, want the key let through once the capped debt is paid")
	}
}

// TestStoreOutageIsNoOffence: with on_error = "deny", a request
// refused because the store could not decide (not because its key is over
// a quota) is treated as an offence, and its key is banned for the ban's
// duration. In production the penalty box is on the same Redis: Ban then
// succeeds whenever Redis answers again while the breaker is still open
// (decisions stay "deny" until its probe), so a Redis blip bans every
// client active during the breaker's open second. (Here the penalty box
// is the memory one, to make the point without timing.)
func TestStoreOutageIsNoOffence(t *testing.T) {
	up := &countingUpstream{status: 200}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	rs, err := redisstore.New(c, redisstore.Options{Timeout: 100 * time.Millisecond, OnError: "deny"})
	if err != nil {
		t.Fatal(err)
	}
	bk := &rlBackend{store: rs, bans: memstore.NewBans(memstore.BanOptions{})}
	e := newRLEnv(t, offenceCfg, srv.URL, bk, time.Now)
	code, _ := send(t, "GET", e.addr+"/x", "X-Key", "k")
	list, _ := bk.bans.List(context.Background(), "p", time.Now(), 10)
	t.Logf("first request with the store down: %d; bans %d", code, len(list))
	if len(list) != 0 {
		t.Errorf("a client's first request, refused only because the store is down, banned it for %v", list[0].Until.Sub(list[0].Since).Round(time.Second))
	}
}

const concQueueCfg = `
[[upstream]]
name = "auth"
targets = [%q]
[[policy]]
name = "login"
upstream = "auth"
match = { path = "/login" }
  [policy.concurrency]
  limit = 1
  queue = 20
  max_wait = "10s"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "15m"
  count = { status = [401] }
`

// TestCountBoundCountsConcurrencyQueue: docs/response-limits.md
// says that with "[policy.concurrency] limit = c on the policy, that is at
// most limit + c − 1" failures per key (3 here, with c = 1). But the count
// check runs before the [policy.concurrency] gate, and requests waiting in
// its queue were all checked already: each is forwarded when a slot frees,
// never checked again. The bound is limit + c + queue − 1.
func TestCountBoundCountsConcurrencyQueue(t *testing.T) {
	const clients = 12
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(30 * time.Millisecond) // requests overlap at the concurrency gate
		w.WriteHeader(401)
	}))
	t.Cleanup(srv.Close)
	b := newRLBackend(t, "memory", time.Now)
	e := newRLEnv(t, concQueueCfg, srv.URL, b, time.Now)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	done := make(chan int, clients)
	for range clients {
		go func() {
			req, _ := http.NewRequest("POST", e.addr+"/login", nil)
			resp, err := client.Do(req)
			if err != nil {
				done <- -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	var codes []int
	for range clients {
		codes = append(codes, <-done)
	}
	t.Logf("statuses: %v", codes)
	// The requests waiting in the [policy.concurrency] queue were checked
	// before the limit was reached: the documented bound counts them,
	// limit + c + q − 1 = 3 + 1 + 20 − 1.
	if got := n.Load(); got > 23 {
		t.Errorf("%d failures of one key reached the upstream; docs bound: limit + c + q − 1 = 23", got)
	}
	if code, _ := send(t, "POST", e.addr+"/login"); code != 429 {
		t.Errorf("after the burst: %d, want 429 (the limit is spent)", code)
	}
}

const avgLockoutCfg = `
[[upstream]]
name = "llm"
targets = [%q]
[[policy]]
name = "tokens"
upstream = "llm"
key = ["header:X-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 100
  window = "1m"
  cost_from = "header:X-Cost"
  estimate = 10
  estimate_from = "average"
`

// TestAverageOverCapacityNoLockout: with estimate_from =
// "average", one answer that reports more than the limit's capacity (150
// against 100 per minute: allowed, the charge goes into debt) makes the
// key's average 150. From then on every request reserves 150, which can
// never fit, so it is refused (Retry-After of centuries) — and since no
// answer comes back, the average never falls again. The key is locked out
// for the life of the process (the averages survive reloads), long after
// its debt is paid.
func TestAverageOverCapacityNoLockout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Cost", r.Header.Get("X-Want"))
	}))
	t.Cleanup(srv.Close)
	clock := newClock()
	b := newRLBackend(t, "memory", clock.now)
	e := newRLEnv(t, avgLockoutCfg, srv.URL, b, clock.now)
	if code, _ := send(t, "GET", e.addr+"/x", "X-Key", "k", "X-Want", "150"); code != 200 {
		t.Fatalf("first: %d", code)
	}
	clock.advance(10 * time.Minute) // the debt is long paid
	code, h := send(t, "GET", e.addr+"/x", "X-Key", "k", "X-Want", "5")
	t.Logf("10 minutes later: %d Retry-After %q", code, h.Get("Retry-After"))
	if code != 200 {
		t.Errorf("10 windows after one answer of 150, a request of the same key is refused %d (Retry-After %s): its average (150) can never fit in 100", code, h.Get("Retry-After"))
	}
}

// TestBannedGRPCCallResourceExhausted: a gRPC call refused by a limit is answered
// RESOURCE_EXHAUSTED (8, grpc.go), but the same call refused because its
// key is banned (status 429) goes through writeProblem → grpcCode(429) =
// UNAVAILABLE (14), the code gRPC clients' retry policies retry at once:
// a banned gRPC client is told to retry immediately, and the ban's
// Retry-After means nothing to it.
func TestBannedGRPCCallResourceExhausted(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
	}))
	t.Cleanup(up.Close)
	b := newRLBackend(t, "memory", time.Now)
	e := newRLEnv(t, offenceCfg, up.URL, b, time.Now)
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	t.Cleanup(client.CloseIdleConnections)
	call := func() string {
		req, _ := http.NewRequest("POST", e.addr+"/svc/Method", strings.NewReader("msg"))
		req.Header.Set("Content-Type", "application/grpc+proto")
		req.Header.Set("X-Key", "k")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if s := resp.Trailer.Get("Grpc-Status"); s != "" {
			return s
		}
		return resp.Header.Get("Grpc-Status")
	}
	codes := []string{call(), call(), call()}
	t.Logf("grpc-status: allowed %s, rejected %s, banned %s", codes[0], codes[1], codes[2])
	if codes[2] != "8" {
		t.Errorf("a banned gRPC call is answered grpc-status %s; a rejected one %s (RESOURCE_EXHAUSTED)", codes[2], codes[1])
	}
}
