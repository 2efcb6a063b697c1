package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// differentialConfig has every algorithm, an enforced and a shadow
// penalty box, a shadow policy, keys from the address, a header, a cookie
// and a query parameter (so ambiguous key parts), on_missing "reject" and
// "skip", limits with keys of their own beside a [policy.concurrency]
// under the policy's key, limits that read the answer (count,
// cost_from), a shared limit, and per-key overrides (TestDecideDifferential).
const differentialConfig = `
[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]

[[shared_limit]]
name = "site"
key = ["ip"]
algorithm = "fixed_window"
limit = 30
window = "10s"

[[policy]]
name = "tb"
upstream = "app"
match = { path_prefix = "/tb/" }
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "2/s"
  burst = 3
  [policy.ban]
  duration = "3s"
  escalation = 2
  max_duration = "20s"
  forget_after = "1m"
  status = 403

[[policy]]
name = "lb"
upstream = "app"
match = { path_prefix = "/lb/" }
key = ["ip"]
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "4/s"
  queue = 3
  max_wait = "2s"

[[policy]]
name = "fw"
upstream = "app"
match = { path_prefix = "/fw/" }
key = ["cookie:sid"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "2s"
  [[policy.limits]]
  shared = "site"

[[policy]]
name = "sl"
upstream = "app"
match = { path_prefix = "/sl/" }
key = ["query:k"]
on_missing = "skip"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 3
  window = "2s"
  [policy.ban]
  duration = "5s"
  mode = "shadow"

[[policy]]
name = "sw"
upstream = "app"
mode = "shadow"
match = { path_prefix = "/sw/" }
key = ["header:X-Key"]
  [[policy.limits]]
  algorithm = "sliding_window"
  limit = 3
  window = "2s"
  slots = 4

[[policy]]
name = "own"
upstream = "app"
match = { path_prefix = "/own/" }
key = ["header:X-Key"]
on_missing = "reject"
  [policy.concurrency]
  limit = 100
  [[policy.limits]]
  algorithm = "token_bucket"
  key = ["ip"]
  rate = "3/s"
  burst = 2
  [[policy.limits]]
  algorithm = "fixed_window"
  key = ["query:k"]
  on_missing = "skip"
  limit = 4
  window = "3s"

[[policy]]
name = "cost"
upstream = "app"
match = { path_prefix = "/cost/" }
key = ["ip"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "5s"
  count = { status = [401] }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "2/s"
  burst = 8
  cost_from = "header:X-Cost"
  estimate = 2
  estimate_from = "header:X-Est"

[[policy]]
name = "lbs"
upstream = "app"
mode = "shadow"
match = { path_prefix = "/lbs/" }
key = ["ip"]
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "2/s"
  queue = 2
`

// answerTransport is the in-process upstream: it answers at once with
// the status the request asks for in X-Want-Status (200 by default) and,
// if the request has X-Want-Cost, that cost in X-Cost.
type answerTransport struct{}

func (answerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	status := 200
	if s := r.Header.Get("X-Want-Status"); s != "" {
		status, _ = strconv.Atoi(s)
	}
	h := http.Header{"Content-Type": {"text/plain"}}
	if c := r.Header.Get("X-Want-Cost"); c != "" {
		h.Set("X-Cost", c)
	}
	return &http.Response{StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(strings.NewReader("ok\n")), ContentLength: 3, Request: r}, nil
}

// trafficRequest is one request of the random traffic.
type trafficRequest struct {
	method, target, remote string
	header                 http.Header
	status                 int   // what the upstream answers
	cost                   int64 // the cost it reports; -1 for none
}

func (q *trafficRequest) request() *http.Request {
	r := httptest.NewRequest(q.method, q.target, nil)
	r.RemoteAddr = q.remote
	r.Header = q.header.Clone()
	return r
}

// randomTraffic draws n requests of rng over differentialConfig's
// policies, a few clients, keys present, absent and ambiguous, invalid
// and unmatched requests. Request i's path ends in /i.
func randomTraffic(rng *rand.Rand, n int) []trafficRequest {
	clients := []string{"192.0.2.1:1000", "192.0.2.2:1000", "192.0.2.3:1000", "[2001:db8::1]:1000", "[2001:db8::2]:1000"}
	prefixes := []string{"/tb/", "/tb/", "/lb/", "/lb/", "/fw/", "/sl/", "/sl/", "/sw/", "/own/", "/cost/", "/cost/", "/lbs/", "/zz/"}
	pick := func(options ...string) string { return options[rng.IntN(len(options))] }
	out := make([]trafficRequest, n)
	for i := range out {
		q := trafficRequest{method: "GET", remote: clients[rng.IntN(len(clients))], header: http.Header{}, status: 200, cost: -1}
		query := pick("", "?k=1", "?k=2", "?k=1", "?k=1", "?k=2", "?k=1&k=2", "?K=2&k=1")
		switch rng.IntN(40) {
		case 0:
			q.method = "get" // a standard method in the wrong case: 400
		case 1:
			q.method = "TRACE" // not allowed to the upstream: 405
		case 2:
			q.method = "POST"
		}
		if v := pick("k1", "k2", "k2", ""); v != "" {
			q.header.Set("X-Key", v)
		}
		if c := pick("sid=a", "sid=b", "sid=a", "", "sid=a; sid=b"); c != "" {
			q.header.Set("Cookie", c)
		}
		if rng.IntN(4) == 0 {
			q.status = 401
		}
		if rng.IntN(2) == 0 {
			q.cost = rng.Int64N(6)
			q.header.Set("X-Want-Cost", strconv.FormatInt(q.cost, 10))
		}
		if rng.IntN(3) == 0 {
			q.header.Set("X-Est", strconv.Itoa(1+rng.IntN(4)))
		}
		q.header.Set("X-Want-Status", strconv.Itoa(q.status))
		q.target = pick(prefixes...) + "r" + strconv.Itoa(i) + query
		out[i] = q
	}
	return out
}

// TestDecideDifferential runs the same random traffic (seeded) through
// the live handler, forwarding to an in-process upstream, and through
// the Evaluator that `limitproxy replay` uses, on the same instants, each
// with a memory store and penalty box of its own and the same per-key
// overrides, and compares every decision, the policy that made it and
// the status of the proxy's own answers. The live side runs in a synctest
// bubble: its leaky-bucket queues wait on timers, which the bubble's
// clock fires exactly on time, as the Evaluator's virtual queues assume.
// No arrival coincides with a queue's release (each arrival's instant has
// nanoseconds of its own), so that the order of the two is not left to
// the scheduler.
func TestDecideDifferential(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { differential(t, seed, 1200) })
		})
	}
}

func differential(t *testing.T, seed uint64, n int) {
	cfg, err := config.Parse("differential.toml", []byte(differentialConfig))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	traffic := randomTraffic(rng, n)

	ov, err := memstore.NewOverrides(memstore.OverrideOptions{})
	if err != nil {
		t.Fatal(err)
	}
	liveSet, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	evalSet, err := policy.Compile(cfg, memstore.New(memstore.Options{VirtualQueues: true}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tb := liveSet.Policies[0]
	for i, o := range []perkey.Override{
		{Limits: []perkey.LimitSpec{{Algorithm: limiter.TokenBucket, Rate: limiter.Rate{N: 10, Per: time.Second}, Burst: 4}}},
		{Scale: 0.5},
	} {
		key, err := KeyFor(tb, &cfg.Server, []string{[]string{"192.0.2.1", "2001:db8::2"}[i]})
		if err != nil {
			t.Fatal(err)
		}
		o.Policy, o.Key = tb.Name, StoreKey(key)
		if err := ov.Set(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}

	core, logs := observer.New(zapcore.DebugLevel)
	h := New(liveSet, Options{AccessLog: true, AccessLogger: zap.New(core), Bans: memstore.NewBans(memstore.BanOptions{}),
		Overrides: ov, Now: time.Now})
	for _, p := range h.snap.Load().pools {
		for _, tg := range p.targets {
			tg.proxy.Transport = answerTransport{}
		}
	}
	ev := NewEvaluator(evalSet, EvaluatorOptions{Bans: memstore.NewBans(memstore.BanOptions{}), Overrides: ov})

	verdicts := make([]Verdict, n)
	var wg sync.WaitGroup
	at := time.Now()
	for i := range traffic {
		q := &traffic[i]
		// Up to 150 ms apart, at i nanoseconds past a millisecond.
		at = at.Truncate(time.Millisecond).Add(time.Duration(rng.IntN(150))*time.Millisecond + time.Duration(i+1))
		time.Sleep(time.Until(at))

		v := ev.Evaluate(q.request(), at)
		if v.Status == 0 {
			ev.Answer(v, q.status, q.cost, at)
		}
		verdicts[i] = v

		r := q.request()
		wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), r) })
		// Decided (and answered, unless queued) before the next arrival.
		synctest.Wait()
	}
	time.Sleep(time.Minute) // every queue empties
	wg.Wait()

	type logged struct {
		policy, decision string
		status           int
	}
	live := map[string]logged{}
	for _, e := range logs.FilterMessage("request").All() {
		m := e.ContextMap()
		live[m["path"].(string)] = logged{m["policy"].(string), m["decision"].(string), int(m["status"].(int64))}
	}
	seen := map[Decision]int{}
	mismatches := 0
	for i, q := range traffic {
		v := verdicts[i]
		seen[v.Decision]++
		path, _, _ := strings.Cut(q.target, "?")
		l, ok := live[path]
		if !ok {
			t.Fatalf("request %d (%s %s): not in the access log", i, q.method, q.target)
		}
		want := logged{v.Policy, v.Decision.String(), v.Status}
		if v.Status == 0 {
			want.status = q.status // forwarded: the upstream's answer
		}
		if l != want {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("request %d (%s %s from %s, %v): live %+v, evaluator %+v (key %q)", i, q.method, q.target, q.remote, q.header, l, want, v.Key)
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d of %d decisions differ", mismatches, n)
	}
	// The traffic reaches every decision the Evaluator makes.
	for d := Allowed; d < numDecisions; d++ {
		if d != Shed && d != StreamRefused && seen[d] == 0 {
			t.Errorf("no request was %s: the traffic does not cover it (%v)", d, seen)
		}
	}
	t.Logf("%d requests: %v", n, seen)
}

// TestDecisionNames: a Decision's name is what the access log, the
// limitproxy_requests_total metric's decision label, the replay report
// and docs/metrics.md say; they never change.
func TestDecisionNames(t *testing.T) {
	want := map[Decision]string{
		0: "", Allowed: "allowed", Rejected: "rejected", Queued: "queued", ShadowRejected: "shadow_rejected",
		Unmatched: "unmatched", Skipped: "skipped", Invalid: "invalid", Shed: "shed", Banned: "banned",
		ShadowBanned: "shadow_banned", StreamRefused: "stream_refused", numDecisions: "decision(12)",
	}
	for d, name := range want {
		if d.String() != name {
			t.Errorf("Decision(%d).String() = %q, want %q", uint8(d), d.String(), name)
		}
		if b, _ := d.MarshalText(); string(b) != name {
			t.Errorf("Decision(%d).MarshalText() = %q, want %q", uint8(d), b, name)
		}
	}
	if len(want) != int(numDecisions)+1 {
		t.Errorf("%d decisions named here, %d defined", len(want)-2, numDecisions-1)
	}
}
