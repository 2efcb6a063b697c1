package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 39: behind nginx, a request for //api/x (which nginx routes to
// its location /api/, its slashes merged) reached the forward-auth
// endpoint as X-Original-URI: //api/x, which it refused with 400, and
// nginx answered the client 500. The endpoint reads such a target as the
// proxy face does: //api/x is /api/x, counted against the same key.

// apiOnlyPolicies: /api/ allows len(apiSpellings) requests an hour per
// client address; no other policy (what no policy matches is forwarded
// unlimited, [server] unmatched's default with one upstream), as behind
// docs/forward-auth.md's nginx recipe, which asks only for location
// /api/.
var apiOnlyPolicies = `
[[upstream]]
name = "unused"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "api"
upstream = "unused"
match = { path_prefix = "/api/" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = ` + strconv.Itoa(len(apiSpellings)) + `
  window = "1h"
`

// apiSpellings are ways of writing /api/x that the front proxies route
// to /api/ and limitproxy's canonical form reads as /api/x (or a path
// under /api/), each with no other reading.
var apiSpellings = []string{
	"/api/x", "//api/x", "/api//x", "///api/x", "//api//x?n=1",
	"/api/./x", "/api/v1/../x", "/%61pi/x", "/api/%78", "/api/x/.",
}

// anyCountingUpstream counts every request that reaches it, however its
// path is written.
func anyCountingUpstream(t *testing.T) (addr string, n *atomic.Int64) {
	n = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "UPSTREAM\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), n
}

// rawGet sends GET target, written as it is on the request line, to
// addr, and returns the response (its body read and closed).
func rawGet(t *testing.T, addr, target string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestForwardAuthSpellings: through nginx's, Caddy's and (simulated)
// Traefik's recipes, each spelling of /api/x is let through once, all
// counted against one key (the client's), and once the budget is spent
// every spelling gets 429 with Retry-After, never a 500; exactly the
// budget reaches the upstream. With a catch-all policy beside /api/, a
// spelling some upstream reads outside /api/ (//api/x is //api/x to
// Express, /x to WHATWG URL) is refused instead, but never answered 500
// either.
func TestForwardAuthSpellings(t *testing.T) {
	t.Parallel()
	for _, f := range []bypassFront{
		{"nginx", "deny_status = 403\n", runNginxAuthRequest},
		{"caddy", "", runCaddyForwardAuth},
		{"traefik-simulated", "", runTraefikForwardAuth},
	} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			up, served := anyCountingUpstream(t)
			fa := startForwardAuthFor(t, `"127.0.0.1"`, f.extra, apiOnlyPolicies)
			front := f.run(t, up, fa)
			for round, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				for _, target := range apiSpellings {
					resp := rawGet(t, front, target)
					if resp.StatusCode != want {
						t.Errorf("round %d, %s: %d, want %d", round+1, target, resp.StatusCode, want)
						continue
					}
					if want == http.StatusTooManyRequests {
						if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 3000 || ra > 3600 {
							t.Errorf("%s: Retry-After %q, want about an hour", target, resp.Header.Get("Retry-After"))
						}
					}
				}
			}
			if n := served.Load(); n != int64(len(apiSpellings)) {
				t.Errorf("the upstream served %d, want the budget, %d", n, len(apiSpellings))
			}
			if resp := rawGet(t, front, "/free"); resp.StatusCode != http.StatusOK {
				t.Errorf("/free: %d, want 200 (forwarded unlimited)", resp.StatusCode)
			}
		})
		t.Run(f.name+"/catch-all", func(t *testing.T) {
			t.Parallel()
			up, _ := anyCountingUpstream(t)
			fa := startForwardAuthFor(t, `"127.0.0.1"`, f.extra, forwardAuthPolicies)
			front := f.run(t, up, fa)
			for _, target := range append(apiSpellings, "//x/api/y", "/login//..", "//", "/api/x/../../free") {
				if resp := rawGet(t, front, target); resp.StatusCode >= 500 {
					t.Errorf("%s: %d, want an answer of limitproxy's, not a front proxy's 5xx", target, resp.StatusCode)
				}
			}
		})
	}
}
