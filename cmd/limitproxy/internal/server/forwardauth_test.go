package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// The forward-auth endpoint behind real proxies: nginx's auth_request and
// Caddy's forward_auth, each in front of a real upstream that counts what
// reaches it. The client connects from 127.0.0.5, the proxies reach
// limitproxy from 127.0.0.1, the only trusted sender.

// forwardAuthPolicies: /api/ allows 3 an hour per client address;
// everything else is let through.
const forwardAuthPolicies = `
[[upstream]]
name = "unused"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "api"
upstream = "unused"
match = { path_prefix = "/api/" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 3
  window = "1h"

[[policy]]
name = "rest"
upstream = "unused"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 100000
  window = "1h"
`

// countingUpstream is a Go server that counts the requests reaching it
// under /api/.
func countingUpstream(t *testing.T) (addr string, api *atomic.Int64) {
	api = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			api.Add(1)
		}
		io.WriteString(w, "UPSTREAM\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), api
}

// startForwardAuth runs limitproxy with forwardAuthPolicies and its
// forward-auth endpoint (extra: more [forward_auth] keys), returning the
// endpoint's address.
func startForwardAuth(t *testing.T, senders, extra string) string {
	t.Helper()
	return startForwardAuthFor(t, senders, extra, forwardAuthPolicies)
}

// startForwardAuthFor is startForwardAuth with the policies given.
func startForwardAuthFor(t *testing.T, senders, extra, policies string) string {
	t.Helper()
	src := "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n[log]\nlevel = \"error\"\n" +
		"[forward_auth]\nlisten = \"127.0.0.1:0\"\ntrusted_senders = [" + senders + "]\n" + extra + policies
	return startServer(t, "fa.toml", src).ForwardAuth.String()
}

// fromClient sends one request to addr from 127.0.0.5 with the header
// pairs hdr, returning the response (body read).
func fromClient(t *testing.T, addr, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}}).DialContext,
		DisableKeepAlives: true,
	}}
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// spoofs are what a client adds to its i-th request to walk around the
// limit: a new address each time, and another request described in the
// headers the proxies use to describe it.
func spoofs(i int) []string {
	return []string{"X-Forwarded-For", "203.0.113." + strconv.Itoa(i), "X-Forwarded-Uri", "/free", "X-Original-URI", "/free",
		"X-Forwarded-Method", "OPTIONS", "X-Original-Method", "OPTIONS", "X-Forwarded-Host", "other" + strconv.Itoa(i) + ".example"}
}

// TestForwardAuthNginx: nginx's auth_request asks limitproxy (the recipe
// of docs/forward-auth.md, deny_status = 403 turned back into 429 with
// Retry-After by error_page): exactly the limit reaches the upstream,
// whatever the client adds to its requests, and the rest get 429 with
// Retry-After.
func TestForwardAuthNginx(t *testing.T) {
	up, api := countingUpstream(t)
	fa := startForwardAuth(t, `"127.0.0.1"`, "deny_status = 403\n")
	addr := runNginxAuthRequest(t, up, fa)

	checkForwardAuthFront(t, addr, api)
	if resp, _ := fromClient(t, addr, "/api/x"); resp.Header.Get("RateLimit") == "" {
		t.Errorf("the refusal carries no RateLimit field: %v", resp.Header)
	}
}

// runNginxAuthRequest starts nginx with docs/forward-auth.md's
// auth_request recipe, as written there but for its location: / here, so
// that every path is asked about. nginx proxies to backend and asks the
// forward-auth endpoint at fa (started with deny_status = 403).
func runNginxAuthRequest(t *testing.T, backend, fa string) string {
	t.Helper()
	return runNginx(t, "127.0.0.1", func(port int) string {
		return fmt.Sprintf(`  server {
    listen 127.0.0.1:%[1]d;
    location / {
      auth_request /_limitproxy;
      auth_request_set $limit_retry  $upstream_http_retry_after;
      auth_request_set $limit_fields $upstream_http_ratelimit;
      add_header RateLimit $limit_fields always;
      error_page 403 = @ratelimited;
      proxy_pass http://%[2]s;
    }
    location = /_limitproxy {
      internal;
      proxy_pass http://%[3]s;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-URI $request_uri;
      proxy_set_header X-Original-Method $request_method;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      # The client's own copies of the other family: removed.
      proxy_set_header X-Forwarded-Uri "";
      proxy_set_header X-Forwarded-Method "";
    }
    location @ratelimited {
      add_header Retry-After $limit_retry always;
      add_header RateLimit $limit_fields always;
      return 429;
    }
  }
`, port, backend, fa)
	})
}

// TestForwardAuthCaddy: Caddy's forward_auth asks limitproxy, which
// answers a refusal itself (429 with Retry-After, passed to the client as
// it is): exactly the limit reaches the upstream.
func TestForwardAuthCaddy(t *testing.T) {
	up, api := countingUpstream(t)
	fa := startForwardAuth(t, `"127.0.0.1"`, "")
	addr := runCaddyForwardAuth(t, up, fa)

	checkForwardAuthFront(t, addr, api)
}

// runCaddyForwardAuth starts Caddy (Debian's, stopped when the test ends)
// with docs/forward-auth.md's forward_auth recipe, as written there but
// for its site address: plain HTTP on a free loopback port here. Caddy
// proxies to backend and asks the forward-auth endpoint at fa. Its
// storage, home and configuration directories are the test's.
func runCaddyForwardAuth(t *testing.T, backend, fa string) string {
	t.Helper()
	dir := t.TempDir()
	return startOnPort(t, "127.0.0.1", func(port int) proc {
		conf := fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system %[1]s/data
}
http://:%[2]d {
	bind 127.0.0.1
	forward_auth %[4]s {
		uri /
		copy_headers RateLimit RateLimit-Policy
		# The client's own copies of the other family: removed.
		header_up -X-Original-URI
		header_up -X-Original-Method
	}
	reverse_proxy %[3]s
}
`, dir, port, backend, fa)
		os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(conf), 0o644)
		env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
		return proc{env: env, name: "caddy", args: []string{"run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile"}}
	})
}

// checkForwardAuthFront sends 6 requests to /api/x through the proxy at
// addr, each with spoofs, then one that is not limited: 3 reach the
// upstream, the others get 429 with a Retry-After of about an hour.
func checkForwardAuthFront(t *testing.T, addr string, api *atomic.Int64) {
	t.Helper()
	for i := range 6 {
		resp, body := fromClient(t, addr, "/api/x?n="+strconv.Itoa(i), spoofs(i)...)
		want := http.StatusOK
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %q, want %d", i+1, resp.StatusCode, body, want)
		}
		if want == http.StatusTooManyRequests {
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || ra < 3500 || ra > 3600 {
				t.Errorf("request %d: Retry-After %q, want about an hour", i+1, resp.Header.Get("Retry-After"))
			}
		}
	}
	if n := api.Load(); n != 3 {
		t.Errorf("%d requests reached the upstream, want exactly the limit, 3", n)
	}
	if resp, body := fromClient(t, addr, "/free"); resp.StatusCode != 200 || body != "UPSTREAM\n" {
		t.Errorf("/free: %d %q, want the upstream's 200", resp.StatusCode, body)
	}
}

// TestForwardAuthUntrustedRaw: a peer outside trusted_senders (here every
// loopback client) is decided as the request it sends, over a raw socket:
// its X-Forwarded-Uri, X-Original-URI and X-Forwarded-For are ignored.
func TestForwardAuthUntrustedRaw(t *testing.T) {
	fa := startForwardAuth(t, `"192.0.2.1"`, "")
	// Describes /api/x while asking for /free: decided as /free, never
	// counted against /api/.
	for i := range 5 {
		req := "GET /free HTTP/1.1\r\nHost: x\r\nX-Forwarded-Uri: /api/x\r\nX-Original-URI: /api/x\r\nX-Forwarded-Method: GET\r\n" +
			"X-Forwarded-For: 203.0.113." + strconv.Itoa(i) + "\r\nConnection: close\r\n\r\n"
		if status, body := probe(t, fa, req); status != 200 {
			t.Fatalf("request %d: %d %q, want 200 (decided as /free)", i+1, status, body)
		}
	}
	// Asks for /api/x with a new X-Forwarded-For each time: one client,
	// the peer, whose limit is 3.
	for i := range 5 {
		req := "GET /api/x HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113." + strconv.Itoa(i) + "\r\nConnection: close\r\n\r\n"
		want := 200
		if i >= 3 {
			want = 429
		}
		if status, body := probe(t, fa, req); status != want {
			t.Fatalf("/api/x request %d: %d %q, want %d", i+1, status, body, want)
		}
	}
}

// TestForwardAuthReloadSections: a reload names [forward_auth] as
// "forward_auth" among the changed sections; its listen needs a restart,
// its other keys apply live.
func TestForwardAuthReloadSections(t *testing.T) {
	parse := func(fa string) *config.Config {
		cfg, err := config.Parse("fa.toml", []byte("[forward_auth]\n"+fa+forwardAuthPolicies))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a := parse("listen = \"127.0.0.1:9092\"\ntrusted_senders = [\"127.0.0.1\"]\n")
	b := parse("listen = \"127.0.0.1:9093\"\ntrusted_senders = [\"127.0.0.1\"]\n")
	c := parse("listen = \"127.0.0.1:9092\"\ntrusted_senders = [\"127.0.0.2\"]\ndeny_status = 403\n")
	if _, _, changed := diffSections(a, c); !slices.Equal(changed, []string{"forward_auth"}) {
		t.Errorf("changed = %v, want [forward_auth]", changed)
	}
	if got := restartOnly(a, b); !slices.Equal(got, []string{"forward_auth.listen"}) {
		t.Errorf("restartOnly = %v, want [forward_auth.listen]", got)
	}
	if got := restartOnly(a, c); len(got) != 0 {
		t.Errorf("restartOnly of live keys = %v, want none", got)
	}
}

// TestForwardAuthPreflight: a forward_auth.listen that is not an address,
// or is taken, stops the start (and `limitproxy check`) at its key.
func TestForwardAuthPreflight(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, listen := range []string{"127.0.0.1:http-alt", taken.Addr().String()} {
		cfg, err := config.Parse("fa.toml", []byte("[admin]\nlisten = \"\"\n[server]\nlisten = \"127.0.0.1:0\"\n[forward_auth]\nlisten = \""+listen+"\"\ntrusted_senders = [\"127.0.0.1\"]\n"+forwardAuthPolicies))
		if err != nil {
			t.Fatal(err)
		}
		err = Preflight(cfg, PreflightOptions{Bind: true})
		if err == nil || !strings.Contains(err.Error(), "fa.toml:6:1: forward_auth.listen:") {
			t.Errorf("listen %q: %v, want an error at forward_auth.listen", listen, err)
		}
	}
}

// TestForwardAuthConnectionBound: the forward-auth listener is bounded by
// max_connections too: past it a connection is answered 503 (a refusal,
// for the asking proxy), never left to exhaust the process's descriptors.
func TestForwardAuthConnectionBound(t *testing.T) {
	src := "[server]\nlisten = \"127.0.0.1:0\"\nmax_connections = 2\n[admin]\nlisten = \"\"\n[log]\nlevel = \"error\"\n" +
		"[forward_auth]\nlisten = \"127.0.0.1:0\"\ntrusted_senders = [\"127.0.0.1\"]\n" + forwardAuthPolicies
	fa := startServer(t, "fa.toml", src).ForwardAuth.String()
	for range 2 {
		c, err := net.Dial("tcp", fa)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Served: an answer proves the connection was accepted.
		io.WriteString(c, "GET /free HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if status, _ := probe(t, fa, "GET /free HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); status != 503 {
		t.Errorf("a third connection: %d, want 503", status)
	}
}
