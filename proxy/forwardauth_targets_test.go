package proxy

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// targetsConfig: /login exactly, /api/ keyed by the path and the query
// parameter k, and CATCHALL (a catch-all policy keyed by the path, or
// nothing: unmatched requests are forwarded unlimited). Limits are far
// off: what is compared is how a target is read.
const targetsConfig = `
[forward_auth]
listen = "127.0.0.1:0"
trusted_senders = ["10.0.0.1"]

[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]

[[policy]]
name = "login"
upstream = "app"
match = { path = "/login" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1000
  window = "1h"

[[policy]]
name = "api"
upstream = "app"
match = { path_prefix = "/api/" }
key = ["path", "query:k"]
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1000
  window = "1h"
CATCHALL
`

const targetsCatchAll = `
[[policy]]
name = "rest"
upstream = "app"
key = ["path"]
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1000
  window = "1h"
`

// oddTargets are request-targets as a client may write them: every
// spelling of a policy's path the canonical form or a reading changes,
// and what the proxy face refuses.
var oddTargets = []string{
	"/api/x", "//api/x", "///api/x", "/api//x", "/api///x", "//api//x", "/api/x//",
	"/api/./x", "/api/x/.", "/api/x/..", "/./api/x", "/api/%2e/x", "/api/%2E%2e/api/x",
	"/api/v1/%2e%2e/x", "/api/v1/../x", "/%61pi/x", "/%61%70%69/%78", "/api/%7ex", "/api/~x",
	"/api/x?k=1", "//api/x?k=1", "/api//x?k=1&j=2", "/api/x?k=1&k=2", "/api/x?k=%zz", "/api/x?",
	"/api/x/", "/api/X", "/API/x", "/Api/x", "/api%2Fx", "/api/a%2Fb", "/api/a%2f%2fb",
	"/api/x%00", "/api/x#f", "/api/x?y#f", `/api\x`, `/api/x\..\..\login`, "/api%5Cx",
	"/api/x;p=1", "/api;p/x", "/api/x.", "/api/x%20", "/api/%C0%AE%C0%AE/login",
	"/api/caf\xc3\xa9", "/api/caf%c3%a9", "/api/caf%C3%A9",
	"/login", "//login", "///login", "/./login", "/a/../login", "/a//../login", "/%6cogin",
	"/login/", "/login//", "/LOGIN", "/login;x", "/login.", "/login%2e", "/login//..",
	"/x//../login", "//x/login", "//x/api/y", "//x/../login", "//api/../login", "//api/x/../../login",
	"/api/x/../../login", "/api/x/../../other", "/api/%2e%2e/other", "/../login", "/%2e%2e/login",
	"/a%2f..%2flogin", "/login%2f", "/a%2F%2Flogin", `/\x/login`, "/%C0%AFlogin",
	"/other", "//other", "/other//x", "/other/./x", "/", "//", "///", "/.", "/..",
	"*", "api/x", "http://app.example/api/x", "http://app.example//api/x",
	"http://APP.example./login", "http://other.example/api/x", "http://app.example",
}

// targetOutcome is how one face decided a target.
type targetOutcome struct {
	policy, decision, key string
	status                int
	detail                string // a refusal's problem detail
}

// same reports whether o and f decided alike: a request net/http's
// server refused before the proxy saw it (decision "") is refused with
// its status by the endpoint too.
func (o targetOutcome) same(f targetOutcome) bool {
	if o.decision == "" {
		return f.status == o.status && f.decision == "invalid"
	}
	o.detail, f.detail = "", ""
	return o == f
}

// decideTargets runs every target through the proxy face (its request
// line read by net/http as its server reads one) and, described in
// X-Original-URI by a trusted sender as nginx's recipe describes it,
// through the forward-auth endpoint of another handler on the same
// policies, and returns both outcomes per target.
func decideTargets(t *testing.T, catchAll string, targets []string) (proxied, asked []targetOutcome) {
	t.Helper()
	cfg, err := config.Parse("targets.toml", []byte(strings.Replace(targetsConfig, "CATCHALL", catchAll, 1)))
	if err != nil {
		t.Fatal(err)
	}
	hasher := NewKeyHasher([]byte("targets"))
	newSide := func() (*Handler, *observer.ObservedLogs) {
		set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
		if err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zapcore.DebugLevel)
		h := New(set, Options{AccessLog: true, AccessLogger: zap.New(core), KeyHasher: hasher, Now: newClock().now})
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
	outcome := func(logs *observer.ObservedLogs, w *httptest.ResponseRecorder) targetOutcome {
		lines := logs.TakeAll()
		if len(lines) != 1 {
			t.Fatalf("%d access lines, want 1", len(lines))
		}
		m := lines[0].ContextMap()
		o := targetOutcome{policy: m["policy"].(string), decision: m["decision"].(string), key: m["key"].(string), status: w.Code}
		var p problem
		if json.Unmarshal(w.Body.Bytes(), &p) == nil {
			o.detail = p.Detail
		}
		return o
	}
	for _, target := range targets {
		w := httptest.NewRecorder()
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: app.example\r\n\r\n")))
		if err != nil {
			// net/http's server answers 400 itself.
			proxied = append(proxied, targetOutcome{status: http.StatusBadRequest, detail: err.Error()})
		} else {
			r.RemoteAddr = "203.0.113.9:1000"
			live.ServeHTTP(w, r)
			proxied = append(proxied, outcome(liveLogs, w))
		}

		a := httptest.NewRequest("GET", "http://app.example/_limitproxy", nil)
		a.RemoteAddr = "10.0.0.1:40000"
		a.Header.Set("X-Original-URI", target)
		a.Header.Set("X-Original-Method", "GET")
		a.Header.Set("X-Forwarded-For", "203.0.113.9")
		w = httptest.NewRecorder()
		fa.ServeHTTP(w, a)
		asked = append(asked, outcome(faLogs, w))
	}
	return proxied, asked
}

// TestForwardAuthTargets: the forward-auth endpoint reads each odd
// request-target as the proxy face reads it — the same canonical form
// (canonicalize), policy, client key and refusal — but where the
// upstream behind the asking proxy, which receives the target as the
// client sent it, routes it under another policy than its canonical form
// selects: dot segments unresolved (Werkzeug, Express), or read by WHATWG
// URL against a base (Node's new URL(req.url, base): empty segments kept,
// a leading "//x" a host). The proxy face forwards the canonical form, so
// those readings are the endpoint's alone; every target decided
// otherwise than on the proxy face is listed here, with the reading
// that refuses it, so that a new difference fails.
func TestForwardAuthTargets(t *testing.T) {
	for _, tc := range []struct {
		name, catchAll string
		// differ lists the targets refused behind forward auth alone.
		differ []string
	}{
		{"catch-all", targetsCatchAll, []string{
			// Express routes these as sent, outside /api/ or /login (its
			// catch-all's handler, counted against another policy), and
			// WHATWG URL reads //api/x as /x.
			"//api/x", "///api/x", "//api//x", "//api/x?k=1", "/./api/x",
			"//login", "///login", "/./login", "/a/../login", "/a//../login",
			"/x//../login", "//x/../login",
			// Express routes these as sent, under /api/.
			"/api/x/../../login", "/api/x/../../other", "/api/%2e%2e/other",
			"//api/../login", "//api/x/../../login",
			// Node routes //x/login as /login, /login//.. as /login/.
			"//x/login", "//x/api/y", "/login//..",
		}},
		{"unmatched forwarded", "", []string{
			// As sent, under /api/ or /login where the canonical form is
			// another's or none's. (A reading that no policy matches is
			// forwarded unlimited anyway: it refuses nothing.)
			"/api/x/../../login", "/api/x/../../other", "/api/%2e%2e/other",
			"//x/login", "//x/api/y", "/login//..",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxied, asked := decideTargets(t, tc.catchAll, oddTargets)
			for i, target := range oddTargets {
				p, f := proxied[i], asked[i]
				listed := slices.Contains(tc.differ, target)
				switch {
				case listed && (f.decision != "invalid" || !faReading(f.detail)):
					t.Errorf("%q: forward auth %+v, want refused for a reading of the target as sent (the proxy face: %+v)", target, f, p)
				case listed && p.decision == "invalid":
					t.Errorf("%q: the proxy face refuses it too (%+v): not a difference", target, p)
				case !listed && !p.same(f):
					t.Errorf("%q:\n\tproxy face   %+v\n\tforward auth %+v", target, p, f)
				}
				if f.status >= 500 {
					t.Errorf("%q: forward auth answered %d", target, f.status)
				}
			}
		})
	}
}

// faReading reports whether a refusal's detail names a reading only
// forward auth takes: of the target as the client sent it.
func faReading(detail string) bool {
	return strings.Contains(detail, "as some upstreams read it") &&
		(strings.Contains(detail, ruleNames[5]) || strings.Contains(detail, ruleNames[7]))
}
