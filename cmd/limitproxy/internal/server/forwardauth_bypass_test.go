package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
)

// Issue 35: behind a front proxy that asks limitproxy's forward-auth
// endpoint, the request the backend routes is the one the client sent,
// as the front proxy passes it on, not the canonical form limitproxy
// decided. A request line the backend reads as /login or /api/… while
// limitproxy decides it as another path (a raw "#" or "\", a ";"
// parameter, a trailing dot, another case) spends no quota. Each front
// proxy here is configured by docs/forward-auth.md's recipe; behind it,
// backends that route as real ones do count the requests each handler
// served, and every attack is sent over a raw socket, its request line
// written byte for byte (Go's client would normalize it).
//
// Traefik's recipe runs simulated (forwardauth_traefik_test.go): Traefik
// is no Debian package, and its module cannot be built from the Go
// module proxy alone (go install refuses a module with replace
// directives; built in its own module, one of those replacements is a
// nested module its zip leaves out and another a fork the proxy does not
// serve).

// bypassPolicies: 1 request an hour per client on /login and on /api/,
// the rest let through.
const bypassPolicies = `
[[upstream]]
name = "unused"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "login"
upstream = "unused"
match = { path = "/login" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"

[[policy]]
name = "api"
upstream = "unused"
match = { path_prefix = "/api/" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"

[[policy]]
name = "rest"
upstream = "unused"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 100000
  window = "1h"
`

// The backends' handlers, in the order routeHits counts them; the first
// two are limited to 1 an hour.
var routeNames = [...]string{"/login", "/api/", "catch-all"}

// routeHits is how many requests each handler of a backend served.
type routeHits [len(routeNames)]int

func (h routeHits) sub(o routeHits) routeHits {
	for i := range h {
		h[i] -= o[i]
	}
	return h
}

// bypassCase is one way of writing /login or a path under /api/, each
// request-target sent once.
type bypassCase struct {
	name    string
	targets []string
}

var bypassCases = []bypassCase{
	{"raw # in the path", []string{`/login#x`, `/login#y`, `/login#z`}},
	{"raw # in the query", []string{`/login?a#b`, `/login?a#c`, `/login?b#d`}},
	{"raw # after a slash", []string{`/login/#x`, `/api/#x`, `/api#/x`}},
	{"raw \\", []string{`/api\b`, `/api\c`, `/api\d`}},
	{"raw \\ ending /login", []string{`/login\`, `/x\..\login`, `\login`}},
	{"%5C", []string{`/api%5Cb`, `/api%5cc`, `/api%5Cd`}},
	{"; parameter", []string{`/login;x=1`, `/login;x=2`, `/login;jsessionid=3`}},
	{"; parameter on /api", []string{`/api;x=1/b`, `/api;/c`, `/API;x/d`}},
	{"..; (servlet dot segment)", []string{`/api/..;/login`, `/api/..;x=1/login`, `/api/x/..;/..;/login`}},
	{"..; from another prefix", []string{`/x/..;/login`, `/y/..;/login`, `/z/..;/api/x`}},
	{"trailing dot", []string{`/login.`, `/login..`, `/api./x`}},
	{"trailing %20", []string{`/login%20`, `/login%20%20`, `/login.%20`}},
	{"trailing %2e", []string{`/login%2e`, `/login%2E`, `/login%2e%2e`}},
	{"case", []string{`/LOGIN`, `/Login`, `/lOgIn`}},
	{"case on /api", []string{`/Api/x`, `/API/y`, `/aPi/z`}},
	{"encoded unreserved", []string{`/%6cogin`, `/%6Cogin`, `/l%6fgin`}},
	{"%2F", []string{`/api%2Fx`, `/api%2fy`, `/api%2Fz`}},
	{"trailing slash", []string{`/login/`, `/login//`, `/login/?n=3`}},
	{"dot segment", []string{`/./login`, `/././login`, `/./api/x`}},
	{"dot-dot segment", []string{`/api/x/../../login`, `/a/../login`, `/a/b/../../api/x`}},
	{"overlong UTF-8", []string{`/%C0%AFlogin`, `/x%C0%AF..%C0%AFlogin`, `/api/x/%C0%AE%C0%AE/%C0%AE%C0%AE/login`, `/x/%E0%80%AF../login`}},
	{"NUL", []string{`/login%00`, `/login%00x`, `/api%00/x`}},
	{"double slash", []string{`//api/x`, `//api/y`, `//login`}},
	{"a host to WHATWG URL", []string{`//x/login`, `//x/api/y`, `///x/login`}},
	{"empty segment and dot-dot", []string{`/login//..`, `/login//.`, `/x//../login`}},
	{"dot-dot out of /api/", []string{`/api/x/../../other`, `/api/%2e%2e/other`, `/api/x/%2E%2E/%2e./other`}},
	{"absolute form", []string{`http://app.example/LOGIN`, `http://app.example/login#x`, `http://app.example/api\b`}},
}

// bypassNotAttacks must reach the backend's catch-all: a limiter that
// refused everything would pass the other checks.
var bypassNotAttacks = []string{"/other", "/loginx", "/apix/y"}

// bypassFront is a front proxy run by docs/forward-auth.md's recipe, in
// front of backend and asking the forward-auth endpoint at fa; extra is
// the [forward_auth] keys the recipe asks for.
type bypassFront struct {
	name  string
	extra string
	run   func(t *testing.T, backend, fa string) string
}

// bypassBackend starts a backend that counts its handlers' requests and
// answers GET /__hits with the counts, in routeNames' order.
type bypassBackend struct {
	name  string
	start func(t *testing.T) string
}

// TestForwardAuthBypass sends each bypassCase through each front proxy
// to each backend, from one client: /login's and /api/'s handlers may
// serve 1 request each (the limit), the first plain request to each, and
// requests to other paths must reach the catch-all. On failure a table
// says which case reached which handler.
func TestForwardAuthBypass(t *testing.T) {
	t.Parallel()
	fronts := []bypassFront{
		{"nginx", "deny_status = 403\n", runNginxAuthRequest},
		{"caddy", "", runCaddyForwardAuth},
		{"traefik-simulated", "", runTraefikForwardAuth},
	}
	backends := []bypassBackend{
		{"flask", startFlaskRoutes},
		{"go", startGoRoutes},
		{"node", startNodeRoutes},
	}
	var (
		mu    sync.Mutex
		leaks = map[string][]string{} // request-target → front/backend through which it leaked
	)
	t.Run("matrix", func(t *testing.T) {
		for _, f := range fronts {
			for _, b := range backends {
				t.Run(f.name+"/"+b.name, func(t *testing.T) {
					t.Parallel() // each its own processes: their start-ups overlap
					leaked := checkBypass(t, f, b)
					mu.Lock()
					defer mu.Unlock()
					for _, target := range leaked {
						leaks[target] = append(leaks[target], f.name+"/"+b.name)
					}
				})
			}
		}
	})
	if len(leaks) > 0 {
		var sb strings.Builder
		w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
		for _, c := range bypassCases {
			for _, target := range c.targets {
				if via := leaks[target]; len(via) > 0 {
					fmt.Fprintf(w, "\n  %s\t(%s)\tthrough %s", target, c.name, strings.Join(via, ", "))
				}
			}
		}
		w.Flush()
		t.Errorf("requests that reached a limited handler past its limit (front proxy/backend):%s", sb.String())
	}
}

// checkBypass runs one front proxy in front of one backend and sends it
// every case; it returns the request-targets that reached a limited
// handler past its limit.
func checkBypass(t *testing.T, f bypassFront, b bypassBackend) (leaked []string) {
	backend := b.start(t)
	fa := startForwardAuthFor(t, `"127.0.0.1"`, f.extra, bypassPolicies)
	front := f.run(t, backend, fa)
	hits := func() routeHits {
		t.Helper()
		_, body := probe(t, backend, "GET /__hits HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
		var h routeHits
		fields := strings.Fields(body)
		if len(fields) != len(h) {
			t.Fatalf("%s's /__hits: %q, want %d counts", b.name, body, len(h))
		}
		for i, s := range fields {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s's /__hits: %q: %v", b.name, body, err)
			}
			h[i] = n
		}
		return h
	}
	// send sends a GET of target through the front proxy, returning the
	// status ("err" where no answer came) and what each handler served.
	send := func(target string) (status string, served routeHits) {
		t.Helper()
		before := hits()
		status = "err"
		if code, _, err := exchange(front, "GET "+target+" HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n"); err == nil {
			status = strconv.Itoa(code)
		}
		return status, hits().sub(before)
	}

	// The first plain request to each limited handler, from a fresh
	// client, is its one allowed request.
	for i, path := range []string{"/login", "/api/x"} {
		status, served := send(path)
		var want routeHits
		want[i] = 1
		if status != "200" || served != want {
			t.Fatalf("the first %s: %s, handlers served %v, want 200 and %v: the front proxy, limitproxy or the backend is broken, nothing was tested", path, status, served, want)
		}
	}

	var (
		total routeHits
		tw    strings.Builder
	)
	w := tabwriter.NewWriter(&tw, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "case\trequest-target [status, handler that served it]…\t%s\t\n", strings.Join(routeNames[:], "\t"))
	for _, c := range bypassCases {
		var (
			outcomes []string
			served   routeHits
		)
		for _, target := range c.targets {
			status, one := send(target)
			outcome := target + " [" + status
			for i, n := range one {
				if n > 0 {
					outcome += " " + routeNames[i]
				}
			}
			outcomes = append(outcomes, outcome+"]")
			if one[0] > 0 || one[1] > 0 {
				leaked = append(leaked, target)
			}
			for i := range one {
				served[i] += one[i]
				total[i] += one[i]
			}
		}
		mark := ""
		if served[0] > 0 || served[1] > 0 {
			mark = "LEAK"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\n", c.name, strings.Join(outcomes, "  "), served[0], served[1], served[2], mark)
	}
	w.Flush()
	t.Logf("%s → %s, after one plain /login and one /api/x (limit 1 an hour each); the counts are each case's requests each handler served:\n%s", f.name, b.name, tw.String())
	if total[0] > 0 || total[1] > 0 {
		t.Errorf("%s → %s: /login's handler served %d more and /api/'s %d more past their limit of 1; the cases marked LEAK in the table above did it",
			f.name, b.name, total[0], total[1])
	}

	// The limit itself holds, and other paths go through.
	if status, served := send("/login"); status != "429" || served != (routeHits{}) {
		t.Errorf("a second plain /login: %s, handlers served %v, want 429 and none", status, served)
	}
	for _, path := range bypassNotAttacks {
		if status, served := send(path); status != "200" || served != (routeHits{0, 0, 1}) {
			t.Errorf("%s: %s, handlers served %v, want 200 from the catch-all", path, status, served)
		}
	}
	return leaked
}

// startFlaskRoutes is a Flask (Werkzeug) backend with the three counted
// handlers.
func startFlaskRoutes(t *testing.T) string {
	return runFlask(t, `
hits = {"login": 0, "api": 0, "other": 0}

@app.route("/__hits")
def counts():
    return "%d %d %d\n" % (hits["login"], hits["api"], hits["other"])

@app.route("/login", methods=ALL)
def login():
    hits["login"] += 1
    return "login\n"

@app.route("/api/", defaults={"p": ""}, methods=ALL)
@app.route("/api/<path:p>", methods=ALL)
def api(p):
    hits["api"] += 1
    return "api\n"

@app.route("/", defaults={"p": ""}, methods=ALL)
@app.route("/<path:p>", methods=ALL)
def other(p):
    hits["other"] += 1
    return "other\n"
`)
}

// startGoRoutes is a Go backend routed by net/http's ServeMux.
func startGoRoutes(t *testing.T) string {
	var n [len(routeNames)]atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /__hits", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d %d %d\n", n[0].Load(), n[1].Load(), n[2].Load())
	})
	for i, pattern := range []string{"/login", "/api/", "/"} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			n[i].Add(1)
			io.WriteString(w, routeNames[i]+"\n")
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// nodeRoutes routes as an Express app does by default, with Node's
// built-ins only: the path of WHATWG URL (which cuts the fragment and
// reads "\" as "/" in an http URL), matched case-insensitively and with
// an optional trailing slash (Express's case sensitive and strict
// routing are off by default).
const nodeRoutes = `
const http = require('http');
const hits = [0, 0, 0];
http.createServer((req, res) => {
  let p;
  try {
    p = new URL(req.url, 'http://x').pathname;
  } catch (e) {
    res.writeHead(400);
    res.end('bad url\n');
    return;
  }
  if (p === '/__hits') {
    res.end(hits.join(' ') + '\n');
    return;
  }
  p = p.toLowerCase();
  let i = 2;
  if (p === '/login' || p === '/login/') i = 0;
  else if (p.startsWith('/api/')) i = 1;
  hits[i]++;
  res.end(['login', 'api', 'other'][i] + '\n');
}).listen(Number(process.argv[2]), '127.0.0.1');
`

// startNodeRoutes is a Node backend (node from PATH) routed by
// nodeRoutes.
func startNodeRoutes(t *testing.T) string {
	dir := t.TempDir()
	script := filepath.Join(dir, "routes.js")
	if err := os.WriteFile(script, []byte(nodeRoutes), 0o644); err != nil {
		t.Fatal(err)
	}
	return startOnPort(t, "127.0.0.1", func(port int) proc {
		return proc{name: "node", args: []string{script, strconv.Itoa(port)}}
	})
}
