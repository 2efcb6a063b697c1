package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// fieldsConfig is a policy of three limits: one named, one with the name
// it derives ("multi.2"), one shared. %s: the upstream's URL; %s: the
// login policy's ban duration.
const fieldsConfig = `
[server]
trusted_proxies = ["127.0.0.1/32"]
rate_limit_headers = "both"

[[upstream]]
name = "app"
targets = ["%s"]

[[shared_limit]]
name = "site"
algorithm = "fixed_window"
limit = 100
window = "1h"

[[policy]]
name = "login"
upstream = "app"
match = { path = "/login" }
  [[policy.limits]]
  name = "attempts"
  algorithm = "sliding_log"
  limit = 2
  window = "1m"
  [[policy.limits]]
  shared = "site"
  [policy.ban]
  duration = "%s"

[[policy]]
name = "multi"
upstream = "app"
  [[policy.limits]]
  name = "burst"
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 3
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 5
  window = "10s"
  [[policy.limits]]
  shared = "site"
`

// fieldsEnv serves fieldsConfig with a memory store, its penalty box and
// per-key overrides, on clock.
type fieldsEnv struct {
	addr string
	set  *policy.Set
	ovs  *memstore.Overrides
}

func newFieldsEnv(t *testing.T, ban string, clock *fakeClock) *fieldsEnv {
	t.Helper()
	up := newUpstream(t, nil)
	cfg, err := config.Parse("fields.toml", fmt.Appendf(nil, fieldsConfig, up.URL, ban))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), clock.now())
	if err != nil {
		t.Fatal(err)
	}
	ovs, err := memstore.NewOverrides(memstore.OverrideOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := New(set, Options{Bans: memstore.NewBans(memstore.BanOptions{}), Overrides: ovs, Now: clock.now})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fieldsEnv{addr: srv.URL, set: set, ovs: ovs}
}

// items parses a RateLimit or RateLimit-Policy field into its items: name
// → parameters, and the names in order.
func items(t *testing.T, h http.Header, field string) (map[string]map[string]int64, []string) {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil {
		t.Fatalf("%s %q: not a Structured Field List: %v", field, h.Values(field), err)
	}
	out := map[string]map[string]int64{}
	var names []string
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		name, isString := item.Value.(string)
		if !ok || !isString {
			t.Fatalf("%s %q: member %#v is not a String item", field, h.Values(field), m)
		}
		if _, dup := out[name]; dup {
			t.Fatalf("%s %q: %q twice", field, h.Values(field), name)
		}
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s %q: %s = %#v, want an Integer", field, h.Values(field), k, v)
			}
			params[k] = n
		}
		out[name] = params
		names = append(names, name)
	}
	return out, names
}

// TestRateLimitPolicyStable: a policy of several limits sends one quota
// policy item per limit, each under a name of its own, and the same
// RateLimit-Policy on every response, rejections included, while
// RateLimit names whichever limit is the most pressing (draft-11 §3: the
// field value SHOULD remain consistent over a sequence of responses). A
// client with a per-key override sees its own quotas under the same
// names, as steadily.
func TestRateLimitPolicyStable(t *testing.T) {
	clock := newClock()
	e := newFieldsEnv(t, "15m", clock)
	const want = `"burst";q=3;w=3, "multi.2";q=5;w=10, "site";q=100;w=3600`
	pressing := map[string]bool{}
	for i, step := range []time.Duration{0, 0, 1200 * time.Millisecond, 1200 * time.Millisecond, 0, 0, 0} {
		clock.advance(step)
		code, h := send(t, "GET", e.addr+"/x", "X-Forwarded-For", "192.0.2.1")
		if got := h.Get("Ratelimit-Policy"); got != want {
			t.Errorf("response %d (%d): RateLimit-Policy %q, want %q on every response", i, code, got, want)
		}
		quotas, _ := items(t, h, "Ratelimit-Policy")
		rl, names := items(t, h, "Ratelimit")
		if len(names) != 1 || quotas[names[0]] == nil {
			t.Fatalf("response %d: RateLimit %q: want one item of RateLimit-Policy", i, h.Values("Ratelimit"))
		}
		if r := rl[names[0]]["r"]; r < 0 || r > quotas[names[0]]["q"] {
			t.Errorf("response %d: RateLimit %q: r out of [0, q]", i, h.Get("Ratelimit"))
		}
		if lim := h.Get("X-Ratelimit-Limit"); lim != strconv.FormatInt(quotas[names[0]]["q"], 10) {
			t.Errorf("response %d: X-RateLimit-Limit %s, want the q of %s", i, lim, names[0])
		}
		pressing[names[0]] = true
	}
	if !pressing["burst"] || !pressing["multi.2"] {
		t.Errorf("RateLimit named %v; want the burst first, then the 10 s window as it ran out", pressing)
	}

	// An override doubling one client's quotas: its items keep their
	// names, their q says its own quota, the shared limit's is the zone's.
	key, err := KeyFor(e.set.Policies[1], &e.set.Config.Server, []string{"198.51.100.7"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ovs.Set(context.Background(), perkey.Override{Policy: "multi", Key: StoreKey(key), Scale: 2, SetAt: clock.now()}); err != nil {
		t.Fatal(err)
	}
	const wantOverride = `"burst";q=6;w=3, "multi.2";q=10;w=10, "site";q=100;w=3600`
	for i := range 4 {
		_, h := send(t, "GET", e.addr+"/x", "X-Forwarded-For", "198.51.100.7")
		if got := h.Get("Ratelimit-Policy"); got != wantOverride {
			t.Errorf("overridden client, response %d: RateLimit-Policy %q, want %q", i, got, wantOverride)
		}
	}
	if _, h := send(t, "GET", e.addr+"/x", "X-Forwarded-For", "192.0.2.2"); h.Get("Ratelimit-Policy") != want {
		t.Errorf("another client: RateLimit-Policy %q, want %q", h.Get("Ratelimit-Policy"), want)
	}
}

// TestBanFields: a banned answer's RateLimit agrees with its Retry-After.
// The offence that begins a 15-minute ban is answered Retry-After: 900,
// and RateLimit says every limit of the policy has nothing left for those
// 900 s (not the 60 s the sliding log alone would take); RateLimit-Policy
// is the policy's, as on its 200s. Later answers of the ban count down
// alike, and the legacy fields agree. A ban shorter than the limit's own
// wait gives the limit's: the key would otherwise come back to a new
// offence.
func TestBanFields(t *testing.T) {
	clock := newClock()
	e := newFieldsEnv(t, "15m", clock)
	post := func() (int, http.Header) {
		return send(t, "POST", e.addr+"/login", "X-Forwarded-For", "192.0.2.9")
	}
	_, ok := post()
	policyField := ok.Get("Ratelimit-Policy")
	if policyField != `"attempts";q=2;w=60, "site";q=100;w=3600` {
		t.Fatalf("RateLimit-Policy %q", policyField)
	}
	post()
	check := func(what string, wantRetry int64) {
		t.Helper()
		code, h := post()
		if code != http.StatusTooManyRequests {
			t.Fatalf("%s: %d, want 429", what, code)
		}
		if got := h.Get("Retry-After"); got != strconv.FormatInt(wantRetry, 10) {
			t.Errorf("%s: Retry-After %s, want %d", what, got, wantRetry)
		}
		if got := h.Get("Ratelimit-Policy"); got != policyField {
			t.Errorf("%s: RateLimit-Policy %q, want the policy's %q", what, got, policyField)
		}
		want := fmt.Sprintf(`"attempts";r=0;t=%d, "site";r=0;t=%d`, wantRetry, wantRetry)
		if got := h.Get("Ratelimit"); got != want {
			t.Errorf("%s: RateLimit %q, want %q", what, got, want)
		}
		if rem, reset := h.Get("X-Ratelimit-Remaining"), h.Get("X-Ratelimit-Reset"); rem != "0" || reset != strconv.FormatInt(wantRetry, 10) {
			t.Errorf("%s: X-RateLimit-Remaining %s, -Reset %s; want 0 and %d", what, rem, reset, wantRetry)
		}
	}
	check("the offence", 900)
	clock.advance(100 * time.Second)
	check("100 s into the ban", 800)

	// A ban of 10 s after a sliding log of a minute: the offence's answer
	// waits for the log.
	clock = newClock()
	e = newFieldsEnv(t, "10s", clock)
	post()
	post()
	code, h := post()
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "60" {
		t.Fatalf("the offence under a 10 s ban: %d, Retry-After %s; want 429 and 60 (the sliding log's wait)", code, h.Get("Retry-After"))
	}
	if got, want := h.Get("Ratelimit"), `"attempts";r=0;t=60, "site";r=0;t=10`; got != want {
		t.Errorf("the offence under a 10 s ban: RateLimit %q, want %q", got, want)
	}
}

// TestRejectFieldsAsBuilt: the rate-limit fields a rejection takes built
// once per policy set are, byte for byte, those setRateLimitHeaders
// writes for the same decision, and they are taken for the common
// rejection (r=0, t of a few seconds); a decision they do not hold is left
// to setRateLimitHeaders.
func TestRejectFieldsAsBuilt(t *testing.T) {
	env := newFieldsEnv(t, "1m", newClock())
	for _, p := range env.set.Policies {
		f := newRejectFields(p, config.HeadersDraft)
		for i := range p.Limits {
			for _, d := range []limiter.Decision{
				{Index: int32(i), RetryAfter: 300 * time.Millisecond, Next: 300 * time.Millisecond},
				{Index: int32(i), RetryAfter: 4 * time.Second, Next: 9 * time.Second},
				{Index: int32(i), RetryAfter: 15 * time.Second, Next: 15 * time.Second},
				{Index: int32(i), RetryAfter: 16 * time.Second, Next: 16 * time.Second},
				{Index: int32(i), RetryAfter: time.Hour, Next: time.Hour},
				{Index: int32(i), Remaining: 2, RetryAfter: time.Second, Next: time.Second},
				{Index: int32(i), Allowed: true, Remaining: 0, Next: time.Second},
			} {
				want, got := http.Header{}, http.Header{}
				setRateLimitHeaders(want, config.HeadersDraft, p, d, time.Unix(0, 0))
				took := f.set(got, d)
				short := !d.Allowed && d.Remaining == 0 && d.RetryAfter <= 15*time.Second
				if took != short {
					t.Errorf("%s limit %d, %+v: built fields taken %v, want %v", p.Name, i, d, took, short)
				}
				if !took {
					if len(got) != 0 {
						t.Errorf("%s limit %d, %+v: not taken but wrote %v", p.Name, i, d, got)
					}
					continue
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s limit %d, %+v: built %v, setRateLimitHeaders %v", p.Name, i, d, got, want)
				}
				got.Add("Ratelimit", "x") // an Add copies: the shared value stays
				if again := (http.Header{}); !f.set(again, d) || fmt.Sprint(again) != fmt.Sprint(want) {
					t.Errorf("%s limit %d, %+v: after an Add, built %v", p.Name, i, d, again)
				}
			}
		}
		if newRejectFields(p, config.HeadersBoth) != nil || newRejectFields(p, config.HeadersLegacy) != nil {
			t.Errorf("%s: built fields outside draft mode", p.Name)
		}
	}
}

// retryConfig has a policy per algorithm, one of two limits and one
// with a penalty box; the forward-auth endpoint waits no leaky-bucket
// delay (max_wait = "0s"), so that every delay is a rejection too.
const retryConfig = `
[server]
trusted_proxies = ["127.0.0.1/32"]

[forward_auth]
listen = "127.0.0.1:0"
trusted_senders = ["198.51.100.1/32"]
max_wait = "0s"

[[upstream]]
name = "app"
targets = ["%s"]

[[policy]]
name = "tb"
upstream = "app"
match = { path = "/tb" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "3/s"
  burst = 5

[[policy]]
name = "fw"
upstream = "app"
match = { path = "/fw" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 4
  window = "10s"

[[policy]]
name = "sl"
upstream = "app"
match = { path = "/sl" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 3
  window = "7s"

[[policy]]
name = "sw"
upstream = "app"
match = { path = "/sw" }
  [[policy.limits]]
  algorithm = "sliding_window"
  limit = 5
  window = "9s"

[[policy]]
name = "lb"
upstream = "app"
match = { path = "/lb" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "2/s"
  queue = 3
  max_wait = "1s"

[[policy]]
name = "two"
upstream = "app"
match = { path = "/two" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 4
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 6
  window = "1m"

[[policy]]
name = "ban"
upstream = "app"
match = { path = "/ban" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "5s"
  [policy.ban]
  duration = "20s"
`

// TestRetryAfterNotBeforeEffectiveWindow: draft-11 §6 — a response with
// both Retry-After and RateLimit SHOULD NOT have Retry-After point earlier
// than the end of the effective window (t). Every algorithm's rejection,
// a limit of two, a ban's, and a leaky bucket's turn refused by max_wait
// (its own, and forward auth's), on the proxy face and behind forward
// auth, over random arrivals on an injected clock: each RateLimit item's
// t is at most Retry-After, and Retry-After is at least 1.
func TestRetryAfterNotBeforeEffectiveWindow(t *testing.T) {
	clock := newClock()
	up := newUpstream(t, nil)
	cfg, err := config.Parse("retry.toml", fmt.Appendf(nil, retryConfig, up.URL))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), clock.now())
	if err != nil {
		t.Fatal(err)
	}
	h := New(set, Options{Bans: memstore.NewBans(memstore.BanOptions{}), Now: clock.now})
	fa := h.ForwardAuth()
	rng := rand.New(rand.NewPCG(36, 39))
	proxyPaths := []string{"/tb", "/fw", "/sl", "/sw", "/two", "/ban"}
	allPaths := append(proxyPaths, "/lb")
	rejected := map[string]int{}
	i := 0
	for range 600 {
		// A burst of 1 to 10 requests a few ms apart to one path, on one
		// face, then a pause of up to 3 s.
		face, handler, paths := "proxy", http.Handler(h), proxyPaths
		if rng.IntN(2) == 0 {
			face, handler, paths = "forward auth", fa, allPaths
		}
		path := paths[rng.IntN(len(paths))]
		for range 1 + rng.IntN(10) {
			i++
			clock.advance(time.Duration(rng.IntN(50)) * time.Millisecond)
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = "192.0.2.7:1"
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			if w.Code != http.StatusTooManyRequests {
				continue
			}
			rejected[face+" "+path]++
			ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
			if err != nil || ra < 1 {
				t.Fatalf("request %d, %s %s: Retry-After %q, want a positive integer", i, face, path, w.Header().Get("Retry-After"))
			}
			its, names := items(t, w.Header(), "Ratelimit")
			if len(names) == 0 {
				t.Fatalf("request %d, %s %s: a rejection without RateLimit", i, face, path)
			}
			for _, n := range names {
				if tt := its[n]["t"]; tt > ra {
					t.Errorf("request %d, %s %s: RateLimit %q has t=%d past Retry-After: %d", i, face, path, w.Header().Get("Ratelimit"), tt, ra)
				}
			}
		}
		clock.advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
	}
	for _, face := range []string{"proxy", "forward auth"} {
		for _, p := range allPaths {
			if face == "proxy" && p == "/lb" {
				continue
			}
			if rejected[face+" "+p] == 0 {
				t.Errorf("%s %s: never rejected: nothing was tested there", face, p)
			}
		}
	}
}
