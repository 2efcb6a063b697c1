package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// canonicalConfig has one protected handler per kind of bypass: a path
// (login), a key header (api), a query parameter (q), a cookie (c) and a
// host (host), each allowing 2 an hour, before a generous catch-all.
const canonicalConfig = `
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "login"
upstream = "up"
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "api"
upstream = "up"
match = { path_prefix = "/api/" }
key = ["header:X-API-Key"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "q"
upstream = "up"
match = { path = "/q" }
key = ["query:k"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "c"
upstream = "up"
match = { path = "/c" }
key = ["cookie:sid"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "host"
upstream = "up"
match = { hosts = ["limited.example.com"] }
key = ["host"]
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "default"
upstream = "up"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 10000
  window = "1h"
`

// rawEnv is a proxy in front of an upstream that records each request's
// target as it came on the request line, its Host and its key header.
type rawEnv struct {
	proxy string // host:port
	mu    sync.Mutex
	seen  []string // "METHOD target host=… key=[…]"
}

func startRaw(t *testing.T, edit func(*config.Config)) *rawEnv {
	t.Helper()
	e := &rawEnv{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, fmt.Sprintf("%s %s host=%s key=%q underscore=%q", r.Method, r.RequestURI, r.Host, r.Header.Values("X-Api-Key"), r.Header.Values("X_api_key")))
		e.mu.Unlock()
	})
	cfg, err := config.Parse("canonical.toml", []byte(canonicalConfig))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	cfg.Upstreams[0].Targets = []*url.URL{target}
	cfg.Upstreams[0].PreserveHost = true
	if edit != nil {
		edit(cfg)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, New(set, Options{Now: newClock().now}))
	e.proxy = srv
	return e
}

func newTestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	var p http.Protocols // HTTP/1.1, and h2c for the gRPC tests
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Protocols = &p
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// do sends one raw request (its request line and headers, CRLFs added)
// and returns the status and the policy named in RateLimit-Policy.
func (e *rawEnv) do(t *testing.T, lines ...string) (status int, policyName string) {
	t.Helper()
	c, err := net.Dial("tcp", e.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := strings.Join(lines, "\r\n") + "\r\n"
	if !strings.Contains(strings.ToLower(req), "\r\nhost:") {
		req += "Host: example.com\r\n"
	}
	req += "Content-Length: 0\r\nConnection: close\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", lines[0], err)
	}
	resp.Body.Close()
	name, _, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";")
	return resp.StatusCode, strings.Trim(name, `"`)
}

func (e *rawEnv) upstreamSaw() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// realkeyWithJunk sends n requests for target whose X-API-Key is realkey
// followed by junk that changes each time — a repeated field, a list on
// one line, odd spacing and case — and requires want of them admitted
// (the key counts under realkey alone) and the upstream to have received
// realkey alone.
func (e *rawEnv) realkeyWithJunk(t *testing.T, target string, n, want int) {
	t.Helper()
	ok := 0
	for i := range n {
		var hdr []string
		switch i % 3 {
		case 0:
			hdr = []string{"X-API-Key: realkey", fmt.Sprintf("X-API-Key: junk%d", i)}
		case 1:
			hdr = []string{fmt.Sprintf("X-API-Key: realkey, junk%d", i)}
		case 2:
			hdr = []string{fmt.Sprintf("x-api-key:  realkey  ,junk%d", i)}
		}
		if st, _ := e.do(t, append([]string{"GET " + target + " HTTP/1.1"}, hdr...)...); st == 200 {
			ok++
		}
	}
	if ok != want {
		t.Errorf("realkey with junk: %d admitted, want %d", ok, want)
	}
	for _, s := range e.upstreamSaw() {
		if !strings.Contains(s, `key=["realkey"]`) {
			t.Errorf("upstream saw %q, want the one key value realkey", s)
		}
	}
}

// TestPathSpellings: once /login's 2 are used, no spelling of /login gets
// through, and whatever reaches the upstream carries the path its policy
// matched.
func TestPathSpellings(t *testing.T) {
	e := startRaw(t, nil)
	for range 2 {
		if st, _ := e.do(t, "POST /login HTTP/1.1"); st != 200 {
			t.Fatalf("POST /login: %d", st)
		}
	}
	for _, c := range []struct {
		target string
		want   int    // status
		policy string // that answered, for 200 and 429
	}{
		{"//login", 429, "login"},
		{"/./login", 429, "login"},
		{"/a/../login", 429, "login"},
		{"/%6cogin", 429, "login"},
		{"/%6C%6f%67%69%6e", 429, "login"},
		{"/login?x=1", 429, "login"},
		{"/.well-known/acme-challenge/%2e%2e/%2e%2e/login", 429, "login"},
		{"/.well-known/acme-challenge/../../login", 429, "login"},
		{"http://example.com//login", 429, "login"},
		// Read as /login by Express and ASP.NET Core (a trailing slash,
		// case) and servlet containers (;parameters): refused.
		{"/login/", 400, ""},
		{"/LOGIN", 400, ""},
		{"/login;x", 400, ""},
		{"/login#x", 400, ""},
		{"/login.", 400, ""},
		{"/../login", 400, ""},
		{"/%2e%2e/login", 400, ""},
		{"/login%00", 400, ""},
		{"/a%2f..%2flogin", 400, ""},
		{"/login%2f", 400, ""},
		{"/a%2F%2Flogin", 400, ""},
	} {
		st, name := e.do(t, "POST "+c.target+" HTTP/1.1")
		if st != c.want || (c.policy != "" && name != c.policy) {
			t.Errorf("POST %s: %d (policy %q), want %d (policy %q)", c.target, st, name, c.want, c.policy)
		}
	}
	want := []string{"POST /login", "POST /login"}
	seen := e.upstreamSaw()
	if len(seen) != len(want) {
		t.Fatalf("upstream saw %q, want %q", seen, want)
	}
	for i, s := range seen {
		if !strings.HasPrefix(s, want[i]+" ") {
			t.Errorf("upstream request %d: %q, want %q", i, s, want[i])
		}
	}
}

// TestForwardedPath: the upstream receives the canonical path, with the
// query exactly as sent.
func TestForwardedPath(t *testing.T) {
	e := startRaw(t, nil)
	for target, want := range map[string]string{
		"/x//y/./z/../w?b=%zz;c&&a=1&a=2": "/x/y/w?b=%zz;c&&a=1&a=2",
		"/%7euser/a%2fb/%41":              "/~user/a%2Fb/A",
		"/caf\xc3\xa9":                    "/caf%C3%A9",
	} {
		if st, _ := e.do(t, "GET "+target+" HTTP/1.1"); st != 200 {
			t.Errorf("GET %q: %d", target, st)
			continue
		}
		seen := e.upstreamSaw()
		if got := seen[len(seen)-1]; !strings.HasPrefix(got, "GET "+want+" ") {
			t.Errorf("GET %q: upstream saw %q, want %q", target, got, want)
		}
	}
}

// TestMethods: a standard method in the wrong case is refused, CONNECT is
// refused, TRACE only where allowed, extension methods pass.
func TestMethods(t *testing.T) {
	e := startRaw(t, nil)
	for _, c := range []struct {
		line string
		want int
	}{
		{"post /login HTTP/1.1", 400},
		{"Post /login HTTP/1.1", 400},
		{"get / HTTP/1.1", 400},
		{"TRACE / HTTP/1.1", 405},
		{"CONNECT example.com:443 HTTP/1.1", 405},
		{"PURGE / HTTP/1.1", 200},
		{"GET / HTTP/1.1", 200},
	} {
		if st, _ := e.do(t, c.line); st != c.want {
			t.Errorf("%s: %d, want %d", c.line, st, c.want)
		}
	}
	allowTrace := startRaw(t, func(c *config.Config) { c.Upstreams[0].AllowTrace = true })
	if st, _ := allowTrace.do(t, "TRACE / HTTP/1.1"); st != 200 {
		t.Errorf("TRACE with allow_trace: %d, want 200", st)
	}
}

// TestHostSpellings: every spelling of a limited host counts against its
// one key, and the upstream receives the canonical host.
func TestHostSpellings(t *testing.T) {
	e := startRaw(t, nil)
	admitted := 0
	for _, host := range []string{"limited.example.com", "limited.example.com.", "LIMITED.example.com", "limited.example.com:8080", "limited.example.com.:80", "Limited.Example.Com."} {
		st, name := e.do(t, "GET / HTTP/1.1", "Host: "+host)
		if name != "host" {
			t.Errorf("Host: %s: answered by policy %q, want host", host, name)
		}
		if st == 200 {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("%d admitted, want 2", admitted)
	}
	for _, s := range e.upstreamSaw() {
		if !strings.Contains(s, "host=limited.example.com ") {
			t.Errorf("upstream saw %q, want the host limited.example.com", s)
		}
	}
}

// TestKeyFirstValue: a header key part reads the first value; adding
// values does not make a fresh key, and the upstream sees the value that
// was keyed.
func TestKeyFirstValue(t *testing.T) {
	e := startRaw(t, nil)
	e.realkeyWithJunk(t, "/api/x", 20, 2)
	// X_API_KEY is X-Api-Key to CGI, WSGI and PHP upstreams: dropped.
	if st, _ := e.do(t, "GET /api/x HTTP/1.1", "X-API-Key: realkey", "X_API_KEY: junk"); st != 429 {
		t.Errorf("with X_API_KEY: %d, want 429", st)
	}
	for _, s := range e.upstreamSaw() {
		if strings.Contains(s, "junk") {
			t.Errorf("upstream saw %q", s)
		}
	}
	for _, hdr := range []string{"X-API-Key:", "X-API-Key:   ", "X-API-Key: , realkey"} {
		if st, _ := e.do(t, "GET /api/x HTTP/1.1", hdr); st != 400 {
			t.Errorf("%q: %d, want 400 (empty is missing, on_missing = reject)", hdr, st)
		}
	}
	// A repeated cookie or query parameter is refused instead:
	// TestAmbiguousKeyPartsRefused.
}
