package proxy

import (
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

const accessConfig = `
[log]
%s
[server]
%s
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "all"
upstream = "up"
key = ["ip"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
  [policy.ban]
  duration = "1h"
`

// accessHasher is the key hash the access-log tests' handlers use.
var accessHasher = NewKeyHasher([]byte("access-log-test-secret"))

// startAccess runs accessConfig with logExtra in [log] and srvExtra in
// [server] in front of up, its access log observed at the level the
// process logs at by default (info).
func startAccess(t *testing.T, logExtra, srvExtra string, up *upstream) (addr string, logs *observer.ObservedLogs) {
	t.Helper()
	src := strings.Replace(strings.Replace(accessConfig, "%s", logExtra, 1), "%s", srvExtra, 1)
	cfg, err := config.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	cfg.Upstreams[0].Targets = []*url.URL{target}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	h := New(set, Options{Logger: zap.New(core), AccessLog: true, Bans: memstore.NewBans(memstore.BanOptions{}), KeyHasher: accessHasher})
	return newTestServer(t, h), logs
}

// accessLines returns the access-log lines observed, each as its fields.
func accessLines(logs *observer.ObservedLogs) []map[string]any {
	var out []map[string]any
	for _, e := range logs.FilterMessage("request").All() {
		m := e.ContextMap()
		m["level"] = e.Level.String()
		out = append(out, m)
	}
	return out
}

// waitLines waits (bounded) for n access lines: a line is written when
// the handler returns, which may be just after the client has its answer.
func waitLines(t *testing.T, logs *observer.ObservedLogs, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ls := accessLines(logs); len(ls) >= n || time.Now().After(deadline) {
			if len(ls) < n {
				t.Fatalf("%d access lines, want %d: %v", len(ls), n, ls)
			}
			return ls
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func doGet(t *testing.T, addr string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/x?secret=1", strings.NewReader("hello"))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestAccessLogDefaults: at the default level, an allowed, a rejected and
// a banned request each get a line, with the client address, the key
// hash, bytes both ways, the user agent and the request id; the query
// and the raw key never appear.
func TestAccessLogDefaults(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "0123456789")
	})
	addr, logs := startAccess(t, "", "", up)
	var ids []string
	for _, want := range []int{200, 429, 429} {
		resp := doGet(t, addr, "User-Agent", "probe/1.0")
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
		ids = append(ids, resp.Header.Get("X-Request-Id"))
	}
	ls := waitLines(t, logs, 3)
	key := accessHasher.Key(ipKeyOf(t, "127.0.0.1"))
	for i, want := range []struct {
		decision Decision
		status   int
		received int64
	}{{Allowed, 200, 5}, {Rejected, 429, 0}, {Banned, 429, 0}} {
		l := ls[i]
		if l["level"] != "info" || l["decision"] != want.decision.String() || l["status"] != int64(want.status) {
			t.Errorf("line %d: level %v decision %v status %v, want info %s %d", i, l["level"], l["decision"], l["status"], want.decision, want.status)
		}
		if l["client"] != "127.0.0.1" || l["key"] != key || l["user_agent"] != "probe/1.0" || l["bytes_received"] != want.received {
			t.Errorf("line %d: client %v key %v user_agent %v bytes_received %v", i, l["client"], l["key"], l["user_agent"], l["bytes_received"])
		}
		if id, _ := l["request_id"].(string); !hexID.MatchString(id) || id != ids[i] {
			t.Errorf("line %d: request_id %q, the answer's %q: want the same 32 hex digits", i, id, ids[i])
		}
		if sent, _ := l["bytes_sent"].(int64); sent <= 0 {
			t.Errorf("line %d: bytes_sent %v", i, l["bytes_sent"])
		}
		for k, v := range l {
			if s, ok := v.(string); ok && (strings.Contains(s, "secret=1") || strings.Contains(s, ";")) {
				t.Errorf("line %d: %s = %q: a query or a raw key in the log", i, k, s)
			}
		}
	}
	if ls[0]["bytes_sent"] != int64(10) {
		t.Errorf("allowed: bytes_sent %v, want 10", ls[0]["bytes_sent"])
	}
}

// ipKeyOf is the client key of key = ["ip"] for the address a.
func ipKeyOf(t *testing.T, a string) string {
	t.Helper()
	cfg, _ := config.Parse("k.toml", []byte(strings.Replace(strings.Replace(accessConfig, "%s", "", 1), "%s", "", 1)))
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.RemoteAddr = a + ":1"
	k, _ := clientKey(r, set.Policies[0], &cfg.Server)
	return k
}

// TestAccessLogClientAddress: client_address = "masked" logs the /24 (a
// /48 for IPv6), "hashed" the key hash of the address.
func TestAccessLogClientAddress(t *testing.T) {
	up := newUpstream(t, nil)
	for _, c := range []struct{ mode, want string }{
		{"full", "127.0.0.1"},
		{"masked", "127.0.0.0/24"},
		{"hashed", accessHasher.Addr(netip.MustParseAddr("127.0.0.1"))},
	} {
		addr, logs := startAccess(t, `client_address = "`+c.mode+`"`, "", up)
		doGet(t, addr)
		if got := waitLines(t, logs, 1)[0]["client"]; got != c.want {
			t.Errorf("%s: client %v, want %q", c.mode, got, c.want)
		}
	}
	if got := maskAddr(netip.MustParseAddr("2001:db8:1234:5678::1")).String(); got != "2001:db8:1234::/48" {
		t.Errorf("IPv6 masked: %s", got)
	}
	if got := maskAddr(netip.MustParseAddr("::ffff:203.0.113.77")).String(); got != "203.0.113.0/24" {
		t.Errorf("IPv4-mapped masked: %s", got)
	}
}

// TestRequestID: an X-Request-Id from a trusted proxy is kept; from any
// other peer, or malformed, or sent twice, it is replaced by a generated
// one. The upstream receives the id (even when the client's Connection
// field names it), the client gets it back (once, even when the upstream
// echoes its own), the log has it. W3C traceparent and
// tracestate pass through untouched.
func TestRequestID(t *testing.T) {
	var (
		mu   sync.Mutex
		seen http.Header
	)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("X-Request-Id", "upstream-own")
		io.WriteString(w, "ok")
	})
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	)
	for _, c := range []struct {
		name, trusted string
		sent          []string
		keep          bool
	}{
		{"trusted", `trusted_proxies = ["127.0.0.1/32"]`, []string{"abc-123"}, true},
		{"untrusted", ``, []string{"abc-123"}, false},
		{"trusted, twice", `trusted_proxies = ["127.0.0.1/32"]`, []string{"a", "b"}, false},
		{"trusted, malformed", `trusted_proxies = ["127.0.0.1/32"]`, []string{"a b"}, false},
		{"trusted, too long", `trusted_proxies = ["127.0.0.1/32"]`, []string{strings.Repeat("a", 129)}, false},
		{"none", ``, nil, false},
		{"named by Connection", ``, nil, false},
	} {
		addr, logs := startAccess(t, "", c.trusted, up)
		req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
		for _, v := range c.sent {
			req.Header.Add("X-Request-Id", v)
		}
		req.Header.Set("Traceparent", tp)
		req.Header.Set("Tracestate", ts)
		if c.name == "named by Connection" {
			// A hop-by-hop field to the client, which cannot keep the
			// upstream from getting the id all the same.
			req.Header.Set("Connection", "X-Request-Id")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := resp.Header.Values("X-Request-Id")
		if len(got) != 1 {
			t.Fatalf("%s: the answer's X-Request-Id %q, want one", c.name, got)
		}
		id := got[0]
		if c.keep && id != c.sent[0] || !c.keep && !hexID.MatchString(id) {
			t.Errorf("%s: request id %q (sent %q)", c.name, id, c.sent)
		}
		mu.Lock()
		if v := seen.Values("X-Request-Id"); len(v) != 1 || v[0] != id {
			t.Errorf("%s: the upstream got X-Request-Id %q, want %q", c.name, v, id)
		}
		if seen.Get("Traceparent") != tp || seen.Get("Tracestate") != ts {
			t.Errorf("%s: traceparent %q tracestate %q reached the upstream", c.name, seen.Get("Traceparent"), seen.Get("Tracestate"))
		}
		mu.Unlock()
		if l := waitLines(t, logs, 1)[0]; l["request_id"] != id {
			t.Errorf("%s: logged request_id %v, want %q", c.name, l["request_id"], id)
		}
	}
}

var bytesSent = regexp.MustCompile(`"method":"([A-Z]+)"[^\n]*"status":(\d+)[^\n]*"bytes_sent":(\d+)`)

// TestRejectHeadBytesSent: the access log's bytes_sent is "bytes of
// response body sent to the client" (docs/metrics.md), so a HEAD logs 0,
// forwarded or refused by the proxy itself, on the front and on
// net/http's server alike. A refused HEAD used to log the length of the
// body it would have sent (189), which nobody sent: reject's Write (and
// writeWhole, which adds len(body) as the Write it stands for) counted
// what the server's Write returns, the whole body for HEAD. The recorder
// now counts no body bytes for HEAD.
func TestRejectHeadBytesSent(t *testing.T) {
	t.Parallel()
	up := startScriptUpstream(t, map[string]string{"p": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"}).ln.Addr().String()
	for _, via := range []wholeVia{viaFront, viaNetHTTP} {
		rig := startWholeRig(t, via, up, wholeCfg, nil, nil)
		readAll(t, rig.addr, "HEAD /r/p HTTP/1.1\r\nHost: a\r\n\r\n") // forwarded
		readAll(t, rig.addr, "HEAD /r/p HTTP/1.1\r\nHost: a\r\n\r\n") // refused
		ms := bytesSent.FindAllStringSubmatch(rig.access.String(), -1)
		if len(ms) != 2 || ms[0][2] != "200" || ms[1][2] != "429" {
			t.Fatalf("%v: access log %q", via, rig.access.String())
		}
		for _, m := range ms {
			if m[3] != "0" {
				t.Errorf("%v: HEAD answered %s logged bytes_sent %s; nothing of a body is sent to HEAD", via, m[2], m[3])
			}
		}
	}
}

// TestNewRequestIDUnique: generated ids are 32 hex digits and never
// repeat, from many goroutines at once (each takes a generator of its
// own from the pool; none is shared by two requests at a time), nor
// across generators made one after another (each seeded anew).
func TestNewRequestIDUnique(t *testing.T) {
	const goroutines, each = 8, 2000
	ids := make(chan string, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				ids <- newRequestID()
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if !hexID.MatchString(id) || seen[id] {
			t.Fatalf("request id %q: malformed or repeated", id)
		}
		seen[id] = true
	}
	// Two generators made one after another start apart.
	a, b := idSources.New().(*mrand.ChaCha8), idSources.New().(*mrand.ChaCha8)
	if a.Uint64() == b.Uint64() {
		t.Error("two generators of idSources start alike")
	}
}
