package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/concurrency"
)

// answer is what a client got from the proxy.
type answer struct {
	code  int
	retry string
	body  string
	took  time.Duration
}

// getAsync sends GET addr+path with header (name, value pairs) and
// returns where its answer arrives (code -1 if it failed).
func getAsync(addr, path string, header ...string) chan answer {
	ch := make(chan answer, 1)
	go func() {
		start := time.Now()
		req, _ := http.NewRequest("GET", addr+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- answer{code: -1, body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b), time.Since(start)}
	}()
	return ch
}

// waitFor polls cond until it holds, failing t after 5 s: for state the
// handler exposes without an event to wait on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.For(t, 5*time.Second, cond, "timed out waiting for %s", what)
}

// concGauge reads the concurrency metric name (the first series) from m.
func concGauge(m *Metrics, name string) float64 {
	return testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		mc := make(chan prometheus.Metric, 64)
		concurrencyCollector{m}.Collect(mc)
		close(mc)
		for x := range mc {
			if strings.Contains(x.Desc().String(), `"`+name+`"`) {
				ch <- x
				return
			}
		}
	}))
}

// TestUpstreamConcurrency, over real HTTP on loopback: an upstream with
// limit = 2, queue = 1, max_wait = 1s gets two requests at a time; the
// third waits for a slot and is forwarded when one frees; the fourth,
// finding the queue full, is answered 503 at once with Retry-After and a
// problem body, without reaching the upstream; a waiter nobody frees a
// slot for is shed after max_wait. The metrics say so.
func TestUpstreamConcurrency(t *testing.T) {
	release := make(chan struct{})
	var reached, peak, now atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		reached.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close) // after the release below (cleanups run last first)
	env := newRLEnv(t, `
[[upstream]]
name = "app"
targets = [%q]
  [upstream.concurrency]
  limit = 2
  queue = 1
  max_wait = "1s"
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, up.URL, newRLBackend(t, "memory", time.Now), time.Now)
	addr, m, reg := env.addr, env.m, env.reg
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done) // a failing test lets the held requests end

	get := func(path string) chan answer { return getAsync(addr, path) }
	gauge := func(name string) float64 { return concGauge(m, name) }

	a, b := get("/hold"), get("/hold")
	waitFor(t, "two requests at the upstream", func() bool { return reached.Load() == 2 })
	c := get("/hold")
	waitFor(t, "one request queued", func() bool { return gauge("limitproxy_upstream_queue_depth") == 1 })
	if f := gauge("limitproxy_upstream_in_flight"); f != 2 {
		t.Fatalf("in flight %v, want 2", f)
	}
	d := <-get("/four")
	if d.code != 503 || d.retry == "" || !strings.Contains(d.body, "concurrency limit") || d.took > time.Second {
		t.Fatalf("fourth: %+v, want 503 with Retry-After at once", d)
	}
	if s, _ := strconv.Atoi(d.retry); s < 1 {
		t.Fatalf("Retry-After %q", d.retry)
	}
	release <- struct{}{} // a's or b's upstream request ends; c takes its slot
	var first answer
	select {
	case first = <-a:
		a = b
	case first = <-b:
	}
	if first.code != 200 {
		t.Fatalf("first: %+v", first)
	}
	waitFor(t, "the queued request at the upstream", func() bool { return reached.Load() == 3 })
	// Full again (b and c): the next waits max_wait and is shed then.
	e := <-get("/five")
	if e.code != 503 || e.took < 900*time.Millisecond {
		t.Fatalf("fifth: %+v, want 503 after about 1s", e)
	}
	done()
	for _, ch := range []chan answer{a, c} { // a: whichever of a and b is left
		if r := <-ch; r.code != 200 {
			t.Fatalf("held: %+v", r)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("%d requests at the upstream at once, want at most 2", p)
	}
	if r := reached.Load(); r != 3 {
		t.Errorf("%d requests reached the upstream, want 3 (the shed ones never do)", r)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("all", Shed.String())); n != 2 {
		t.Errorf("limitproxy_requests_total{decision=shed} = %v, want 2", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP limitproxy_upstream_shed_total Requests an upstream's concurrency limit turned away with 503, by reason (queue_full, wait, timeout).
# TYPE limitproxy_upstream_shed_total counter
limitproxy_upstream_shed_total{reason="queue_full",upstream="app"} 1
limitproxy_upstream_shed_total{reason="timeout",upstream="app"} 1
limitproxy_upstream_shed_total{reason="wait",upstream="app"} 0
# HELP limitproxy_upstream_queued_total Requests that waited for a slot of an upstream's concurrency limit and got one (shadow: would have waited).
# TYPE limitproxy_upstream_queued_total counter
limitproxy_upstream_queued_total{upstream="app"} 1
`), "limitproxy_upstream_shed_total", "limitproxy_upstream_queued_total"); err != nil {
		t.Error(err)
	}
}

// TestPolicyConcurrency, over real HTTP on loopback: a policy's
// [policy.concurrency] (limit 2, queue 1, max_wait 1s, no rate limit
// at all) lets two requests of one client key in flight; the third waits
// and goes when one ends; the fourth gets 429 with Retry-After at once;
// another key is not held up; a waiter nobody frees a slot for gets 429
// after max_wait. Nothing is left held at the end.
func TestPolicyConcurrency(t *testing.T) {
	release := make(chan struct{})
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close) // after the release below (cleanups run last first)
	cfg, err := config.Parse("conc.toml", fmt.Appendf(nil, `
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "per-client"
upstream = "app"
key = ["header:X-Client"]
  [policy.concurrency]
  limit = 2
  queue = 1
  max_wait = "1s"
`, up.URL))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	set, err := policy.Compile(cfg, store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := New(set, Options{})
	addr := "http://" + newTestServer(t, h)
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done) // a failing test lets the held requests end
	alice, err := KeyFor(set.Policies[0], &cfg.Server, []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, client string) chan answer { return getAsync(addr, path, "X-Client", client) }
	queued := func() int {
		h.slotq.mu.Lock()
		defer h.slotq.mu.Unlock()
		return len(h.slotq.q[slotQueueKey{"per-client", alice}])
	}
	a, b := get("/hold", "alice"), get("/hold", "alice")
	waitFor(t, "two of alice's requests at the upstream", func() bool { return reached.Load() == 2 })
	c := get("/hold", "alice")
	waitFor(t, "alice's third queued", func() bool { return queued() == 1 })
	if d := <-get("/four", "alice"); d.code != 429 || d.retry != "1" || d.took > time.Second {
		t.Fatalf("alice's fourth: %+v, want 429 with Retry-After: 1 at once", d)
	}
	if d := <-get("/other", "bob"); d.code != 200 {
		t.Fatalf("bob: %+v, want 200: another key is not held up", d)
	}
	release <- struct{}{} // one of alice's ends: her third takes its slot
	waitFor(t, "alice's third at the upstream", func() bool { return reached.Load() == 4 })
	if d := <-get("/five", "alice"); d.code != 429 || d.took < 900*time.Millisecond {
		t.Fatalf("alice's fifth: %+v, want 429 after max_wait", d)
	}
	done()
	for _, ch := range []chan answer{a, b, c} {
		if r := <-ch; r.code != 200 {
			t.Fatalf("held: %+v", r)
		}
	}
	waitFor(t, "every slot given back", func() bool { return store.SlotsHeld("per-client", alice) == 0 })
	if queued() != 0 || len(h.slotq.q) != 0 {
		t.Fatal("queue entries left")
	}
}

// TestUpstreamOutcome: what the adaptive limit learns from each kind of
// answer — latency only from the upstream's own answers below 500 but 429,
// overload from 429/503/504 and the proxy's 502, nothing from other 5xx,
// tunnels, clients gone or the proxy's answers about a request body.
func TestUpstreamOutcome(t *testing.T) {
	at := time.Unix(1, 0)
	for _, c := range []struct {
		name string
		x    exchange
		want concurrency.Outcome
	}{
		{"200", exchange{w: recorder{status: 200, headerAt: at}}, concurrency.Good},
		{"404", exchange{w: recorder{status: 404, headerAt: at}}, concurrency.Good},
		{"429", exchange{w: recorder{status: 429, headerAt: at}}, concurrency.Overload},
		{"503", exchange{w: recorder{status: 503, headerAt: at}}, concurrency.Overload},
		{"504 of the proxy", exchange{w: recorder{status: 504, headerAt: at}, rec: record{ownAnswer: true}}, concurrency.Overload},
		{"502 of the proxy", exchange{w: recorder{status: 502, headerAt: at}, rec: record{ownAnswer: true}}, concurrency.Overload},
		{"502 of the upstream", exchange{w: recorder{status: 502, headerAt: at}}, concurrency.Neutral},
		{"500", exchange{w: recorder{status: 500, headerAt: at}}, concurrency.Neutral},
		{"101 tunnel", exchange{w: recorder{status: 101, headerAt: at}}, concurrency.Neutral},
		{"client gone", exchange{w: recorder{status: statusClientClosed}}, concurrency.Neutral},
		{"413 about the body", exchange{w: recorder{status: 413, headerAt: at}, rec: record{ownAnswer: true}}, concurrency.Neutral},
		{"no answer", exchange{}, concurrency.Neutral},
	} {
		if got := upstreamOutcome(&c.x); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestUpstreamClasses, over real HTTP on loopback: an upstream with
// limit = 2 and half of it reserved for the checkout class (its policy
// matched by path). A second request of the default class waits though a
// slot is free, since that slot is checkout's; a checkout request takes
// it at once; a second checkout request waits too, and when a slot frees
// it goes first, before the default request that came earlier. The
// per-class metrics say so.
func TestUpstreamClasses(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.URL.Path)
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/hold") {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close) // after the release below (cleanups run last first)
	reached := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(order)
	}
	env := newRLEnv(t, `
[[upstream]]
name = "shop"
targets = [%q]
  [upstream.concurrency]
  limit = 2
  queue = 10
  max_wait = "10s"
  classes = [{ name = "checkout", reserve = 0.5 }]
[[policy]]
name = "checkout"
upstream = "shop"
class = "checkout"
match = { path_prefix = "/checkout/" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
[[policy]]
name = "rest"
upstream = "shop"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, up.URL, newRLBackend(t, "memory", time.Now), time.Now)
	addr, m, reg := env.addr, env.m, env.reg
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done) // a failing test lets the held requests end

	a := getAsync(addr, "/browse/hold")
	waitFor(t, "the first default request at the upstream", func() bool { return reached() == 1 })
	b := getAsync(addr, "/browse/wait")
	waitFor(t, "the second default request queued", func() bool { return concGauge(m, "limitproxy_upstream_queue_depth") == 1 })
	c := getAsync(addr, "/checkout/hold")
	waitFor(t, "the checkout request at the upstream", func() bool { return reached() == 2 })
	d := getAsync(addr, "/checkout/wait")
	waitFor(t, "the second checkout request queued", func() bool { return concGauge(m, "limitproxy_upstream_queue_depth") == 2 })
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP limitproxy_upstream_class_in_flight Requests in flight to an upstream under a concurrency limit, by priority class (upstreams with classes only).
# TYPE limitproxy_upstream_class_in_flight gauge
limitproxy_upstream_class_in_flight{class="checkout",upstream="shop"} 1
limitproxy_upstream_class_in_flight{class="default",upstream="shop"} 1
# HELP limitproxy_upstream_class_queue_depth Requests waiting for a slot of an upstream's concurrency limit, by priority class.
# TYPE limitproxy_upstream_class_queue_depth gauge
limitproxy_upstream_class_queue_depth{class="checkout",upstream="shop"} 1
limitproxy_upstream_class_queue_depth{class="default",upstream="shop"} 1
# HELP limitproxy_upstream_class_reserved Slots of an upstream's concurrency limit kept for a priority class: floor(reserve x the limit in force).
# TYPE limitproxy_upstream_class_reserved gauge
limitproxy_upstream_class_reserved{class="checkout",upstream="shop"} 1
limitproxy_upstream_class_reserved{class="default",upstream="shop"} 0
`), "limitproxy_upstream_class_in_flight", "limitproxy_upstream_class_queue_depth", "limitproxy_upstream_class_reserved"); err != nil {
		t.Error(err)
	}
	release <- struct{}{} // one held request ends, either
	waitFor(t, "a third request at the upstream", func() bool { return reached() >= 3 })
	mu.Lock()
	third := order[2]
	mu.Unlock()
	if third != "/checkout/wait" {
		t.Fatalf("upstream saw %q third, want the checkout waiter first", third)
	}
	done()
	for _, ch := range []chan answer{a, b, c, d} {
		if r := <-ch; r.code != 200 {
			t.Fatalf("answer %+v, want 200", r)
		}
	}
}
