package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// expressPolicies: 1 request an hour per client on /login, under /api/
// and on /users/<id> (a path_regex), the rest let through.
const expressPolicies = `
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
name = "users"
upstream = "unused"
match = { path_regex = "^/users/[0-9]+$" }
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

// expressRoutes routes as Express 4 does by default, with Node's
// built-ins only: the path of req.url as parseurl gives it (cut at '?',
// and at '#', where it falls back to url.parse), neither decoded nor
// its dot segments resolved, matched by path-to-regexp's expressions:
// case-insensitive and with an optional trailing slash (sensitive and
// strict routing off). app.post('/login'), app.all('/api/*'),
// app.get('/users/:id(\\d+)'), and a catch-all.
const expressRoutes = `
const http = require('http');
const hits = [0, 0, 0, 0];
const routes = [/^\/login\/?$/i, /^\/api\/(.*)\/?$/i, /^\/users\/(\d+)\/?$/i];
http.createServer((req, res) => {
  const p = req.url.split('#')[0].split('?')[0];
  if (p === '/__hits') {
    res.end(hits.join(' ') + '\n');
    return;
  }
  let i = routes.findIndex(re => re.test(p));
  if (i < 0) i = 3;
  hits[i]++;
  res.end(['login', 'api', 'users', 'other'][i] + '\n');
}).listen(Number(process.argv[2]), '127.0.0.1');
`

// TestForwardAuthExpressRoutes sends, through nginx's and Caddy's
// forward-auth recipes to a backend routing as Express does, spellings
// of the limited routes that limitproxy's readings must refuse: a
// segment in upper case that a ".." drops from the canonical form
// (Express routes the target as sent, in any case: /API/x/../../other is
// under its /api/*), and a trailing slash against a path_regex policy
// (/users/1/ is its /users/:id). After the one request each limited
// handler may serve, none may serve another.
func TestForwardAuthExpressRoutes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "express.js")
	if err := os.WriteFile(script, []byte(expressRoutes), 0o644); err != nil {
		t.Fatal(err)
	}
	attacks := []string{
		"/API/x/../../other", "/Api/y/../../z", "/aPi/./../q",
		"/users/1/", "/users/2/", "/users/3//",
	}
	for _, f := range []bypassFront{
		{"nginx", "deny_status = 403\n", runNginxAuthRequest},
		{"caddy", "", runCaddyForwardAuth},
		{"traefik-simulated", "", runTraefikForwardAuth},
	} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			backend := startOnPort(t, "127.0.0.1", func(port int) proc {
				return proc{name: "node", args: []string{script, strconv.Itoa(port)}}
			})
			fa := startForwardAuthFor(t, `"127.0.0.1"`, f.extra, expressPolicies)
			front := f.run(t, backend, fa)
			hits := func() []int {
				t.Helper()
				_, body := probe(t, backend, "GET /__hits HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
				var h []int
				for _, s := range strings.Fields(body) {
					n, err := strconv.Atoi(s)
					if err != nil {
						t.Fatalf("/__hits: %q", body)
					}
					h = append(h, n)
				}
				if len(h) != 4 {
					t.Fatalf("/__hits: %q", body)
				}
				return h
			}
			send := func(target string) string {
				code, _, err := exchange(front, "GET "+target+" HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
				if err != nil {
					return "err"
				}
				return strconv.Itoa(code)
			}
			for _, target := range []string{"/login", "/api/x", "/users/7"} {
				if s := send(target); s != "200" {
					t.Fatalf("the first %s: %s, want 200: nothing was tested", target, s)
				}
			}
			if h := hits(); h[0] != 1 || h[1] != 1 || h[2] != 1 {
				t.Fatalf("after one request to each limited route the handlers served %v, want 1 1 1", h)
			}
			for _, target := range attacks {
				before := hits()
				status := send(target)
				after := hits()
				for i, name := range []string{"/login", "/api/*", "/users/:id"} {
					if after[i] > before[i] {
						t.Errorf("%s: %s, and Express's %s handler served it past its limit of 1", target, status, name)
					}
				}
			}
			if s := send("/other"); s != "200" {
				t.Errorf("/other: %s, want 200", s)
			}
		})
	}
}
