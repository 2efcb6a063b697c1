// Package livelog checks logread against the real thing: it runs
// limitproxy and reads its access log back. It is apart from logread's
// own tests so that those build and run without the server.
package livelog

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

var update = flag.Bool("update", false, "rewrite ../testdata/limitproxy.*.log from a real server's log (then update the lines logread's tests copy from them)")

// realConfig has a policy for each decision the access log can record.
const realConfig = `
[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "debug"
format = "FORMAT"
[[upstream]]
name = "up"
targets = ["UPSTREAM"]
[[policy]]
name = "login"
upstream = "up"
key = ["ip"]
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/m"
  burst = 1
[[policy]]
name = "shadow"
upstream = "up"
mode = "shadow"
key = []
match = { path_prefix = "/shadow/" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1m"
[[policy]]
name = "queue"
upstream = "up"
key = []
match = { path = "/queue" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "5/s"
  queue = 5
  max_wait = "5s"
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
on_missing = "reject"
match = { path_prefix = "/api/" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100/s"
  burst = 100
`

// realRequest is one request sent to the server and what its access line
// must say.
type realRequest struct {
	raw                              string // the request, "\n" for CRLF
	method, host, path               string // host "" means the listener's address
	status                           int
	policy, decision, upstream, errs string
}

var realRequests = []realRequest{
	{raw: "POST /login HTTP/1.1\nHost: HOST\nContent-Length: 0\n\n", method: "POST", path: "/login", status: 200, policy: "login", decision: "allowed", upstream: "up"},
	{raw: "POST /login HTTP/1.1\nHost: HOST\nContent-Length: 0\n\n", method: "POST", path: "/login", status: 429, policy: "login", decision: "rejected"},
	{raw: "GET /shadow/x HTTP/1.1\nHost: HOST\n\n", method: "GET", path: "/shadow/x", status: 200, policy: "shadow", decision: "allowed", upstream: "up"},
	{raw: "GET /shadow/x HTTP/1.1\nHost: HOST\n\n", method: "GET", path: "/shadow/x", status: 200, policy: "shadow", decision: "shadow_rejected", upstream: "up"},
	{raw: "GET /queue HTTP/1.1\nHost: HOST\n\n", method: "GET", path: "/queue", status: 200, policy: "queue", decision: "allowed", upstream: "up"},
	{raw: "GET /queue HTTP/1.1\nHost: HOST\n\n", method: "GET", path: "/queue", status: 200, policy: "queue", decision: "queued", upstream: "up"},
	{raw: "GET /api/items?page=2 HTTP/1.1\nHost: Example.COM.\nX-API-Key: k1\n\n", method: "GET", host: "example.com", path: "/api/items", status: 200, policy: "api", decision: "allowed", upstream: "up"},
	{raw: "GET /api/items HTTP/1.1\nHost: HOST\n\n", method: "GET", path: "/api/items", status: 400, policy: "api", decision: "rejected"},
	{raw: "GET /api/caf%C3%A9/%22q%22%09t HTTP/1.1\nHost: HOST\nX-API-Key: k1\n\n", method: "GET", path: "/api/café/\"q\"\tt", status: 200, policy: "api", decision: "allowed", upstream: "up"},
	{raw: "GET /nothing HTTP/1.1\nHost: HOST\n\n", method: "GET", path: "/nothing", status: 200, decision: "unmatched", upstream: "up"}, // [server] unmatched = "forward"
	{raw: "get /api/items HTTP/1.1\nHost: HOST\n\n", method: "get", path: "/api/items", status: 400, decision: "invalid"},
	{raw: "CONNECT example.com:443 HTTP/1.1\nHost: example.com:443\n\n", method: "CONNECT", host: "example.com:443", path: "", status: 405, decision: "invalid"},
}

// lockedBuffer is the server's stderr, read after it stops.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// runRealServer runs limitproxy with realConfig in the given log format,
// sends realRequests one after the other, stops it and returns its log,
// the proxy's address, and when each request was sent and answered.
func runRealServer(t *testing.T, format string) (log []byte, addr string, sent, answered []time.Time) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	src := strings.NewReplacer("FORMAT", format, "UPSTREAM", up.URL).Replace(realConfig)
	cfg, err := config.Parse("real.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	srv, err := server.New(cfg, server.Options{Stderr: stderr, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case a := <-srv.Ready():
		addr = a.Proxy.String()
	case err := <-done:
		stop()
		t.Fatalf("server: %v", err)
	}
	for i, rq := range realRequests {
		raw := strings.ReplaceAll(strings.ReplaceAll(rq.raw, "HOST", addr), "\n", "\r\n")
		sent = append(sent, time.Now())
		status := send(t, addr, raw)
		answered = append(answered, time.Now())
		if status != rq.status {
			t.Errorf("request %d (%q): status %d, want %d", i, strings.SplitN(rq.raw, "\n", 2)[0], status, rq.status)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	stderr.mu.Lock()
	defer stderr.mu.Unlock()
	return bytes.Clone(stderr.b.Bytes()), addr, sent, answered
}

// send writes one request on a new connection and returns the status.
func send(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRealServerLog runs limitproxy itself, in both log encodings, and
// reads its log back: every request is one record, in order, with the
// fields the proxy meant, and Time between when the request was sent and
// when its answer came. With -update it rewrites the fixtures.
func TestRealServerLog(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			log, addr, sent, answered := runRealServer(t, format)
			r, err := logread.NewReader(bytes.NewReader(log), format+".log", logread.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i, rq := range realRequests {
				rec, err := r.Next()
				if err != nil {
					t.Fatalf("record %d: %v\nlog:\n%s", i, err, log)
				}
				host := rq.host
				if host == "" {
					host = addr
				}
				got := realRequest{method: rec.Method, host: rec.Host, path: rec.Path, status: rec.Status,
					policy: rec.Policy, decision: rec.Decision, upstream: rec.Upstream, errs: rec.Error}
				want := rq
				want.raw, want.host = "", host
				if got != want {
					t.Errorf("record %d (line %d) = %+v, want %+v", i, rec.Line, got, want)
				}
				if rec.Format != logread.Limitproxy || rec.Has&(logread.HasTime|logread.HasStatus|logread.HasOutcome|logread.HasDuration) == 0 {
					t.Errorf("record %d: format %q, has %b", i, rec.Format, rec.Has)
				}
				// ts is truncated to the millisecond, and the proxy's clock
				// (MonotonicClock: the wall clock read once, then the
				// monotonic one) may stand a few milliseconds from the wall
				// clock this test reads, as the system clock is slewed: a
				// CI run saw 1.5 ms.
				const slack = 5 * time.Millisecond
				if rec.Time.Before(sent[i].Add(-slack)) || rec.Time.After(answered[i].Add(slack)) {
					t.Errorf("record %d: Time %v not within [%v, %v]", i, rec.Time, sent[i], answered[i])
				}
				if rec.End.Before(rec.Time) || rec.Resolution != time.Millisecond {
					t.Errorf("record %d: End %v, Time %v, Resolution %v", i, rec.End, rec.Time, rec.Resolution)
				}
				if rq.decision == proxy.Queued.String() && rec.QueueWait <= 0 {
					t.Errorf("record %d: queued with queue_wait %v", i, rec.QueueWait)
				}
			}
			if rec, err := r.Next(); err != io.EOF {
				t.Fatalf("after the last request: %+v, %v", rec, err)
			}
			if st := r.Stats(); st.Records != int64(len(realRequests)) || st.Skipped == 0 || st.Malformed != 0 {
				t.Errorf("stats %+v: want %d records, the other lines skipped", st, len(realRequests))
			}
			if *update {
				if err := os.WriteFile(filepath.Join("..", "testdata", "limitproxy."+format+".log"), log, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
