package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// refusingServer is a proxy whose one policy admits one request an hour,
// with client_body_timeout 1s, over a real loopback server; it returns
// the server's address once the hour's request is spent.
func refusingServer(t *testing.T) string {
	t.Helper()
	up := newUpstream(t, nil)
	cfg, err := config.Parse("refused.toml", fmt.Appendf(nil, `[server]
client_body_timeout = "1s"
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
`, up.URL))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(set, Options{}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/spend")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the hour's request: %d", resp.StatusCode)
	}
	return srv.Listener.Addr().String()
}

// TestRefusedBody: a refused request's body is read only as far as
// keeping its connection needs, and never delays the answer past
// client_body_timeout. net/http alone read up to 256 KiB of it before
// writing the answer, with no deadline: a client that declared a body and
// sent none got no 429 and held its connection (8 s and counting, here).
//
// Tolerance: "at once" is under 900 ms, below the 1 s client_body_timeout
// that a delayed answer would have waited for; a stalled body's answer
// comes after that 1 s and well within 5.
func TestRefusedBody(t *testing.T) {
	addr := refusingServer(t)
	for _, c := range []struct {
		name      string
		head      string
		body      string
		wantClose bool
		atOnce    bool
	}{
		// Sent whole: read, the connection serves the next request.
		{"small body sent", "Content-Length: 1000\r\n", strings.Repeat("x", 1000), false, true},
		// Declared and not sent: the answer by client_body_timeout, then close.
		{"small body stalled", "Content-Length: 1000\r\n", "abc", true, false},
		// Longer than a refusal reads, or chunked: answered at once, closed.
		{"large body", "Content-Length: 1073741824\r\n", strings.Repeat("x", 4096), true, true},
		{"chunked", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n", true, true},
		// Never asked for its body: no 100 Continue, the answer at once.
		{"expect 100-continue", "Content-Length: 1000\r\nExpect: 100-continue\r\n", "", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			begin := time.Now()
			if _, err := io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: a\r\n"+c.head+"\r\n"+c.body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer after %v: %v", time.Since(begin), err)
			}
			io.Copy(io.Discard, resp.Body)
			took := time.Since(begin)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", resp.StatusCode)
			}
			if c.atOnce && took > 900*time.Millisecond {
				t.Errorf("the answer took %v; want it at once", took)
			}
			if !c.atOnce && (took < time.Second || took > 5*time.Second) {
				t.Errorf("the answer took %v; want it after client_body_timeout (1s)", took)
			}
			if resp.Close != c.wantClose { // net/http reads "Connection: close" into Close
				t.Errorf("Connection: close %v; want %v", resp.Close, c.wantClose)
			}
			if c.wantClose {
				if n, err := io.Copy(io.Discard, br); err != nil && !strings.Contains(err.Error(), "reset") || n != 0 {
					t.Errorf("after the answer: %d more bytes, %v; want the connection closed", n, err)
				}
				return
			}
			// Kept: the next request on it is answered.
			io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
			resp, err = http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("the next request on the connection: %v, %v", resp, err)
			}
		})
	}
}

// TestRefusedBodyConcurrency: a [policy.concurrency] refusal of a request
// whose declared body does not come is answered by client_body_timeout
// too, with Connection: close (before, no answer: net/http waited for the
// body with no deadline).
func TestRefusedBodyConcurrency(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		<-release
	}))
	t.Cleanup(up.Close) // last: cleanups run last first
	cfg, err := config.Parse("conc.toml", fmt.Appendf(nil, `[server]
client_body_timeout = "1s"
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "one-at-a-time"
upstream = "app"
  [policy.concurrency]
  limit = 1
`, up.URL))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(set, Options{}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // first: srv.Close waits for the held request
	go func() {
		if resp, err := http.Get(srv.URL + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the upstream")
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	begin := time.Now()
	io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\nabc")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer after %v: %v", time.Since(begin), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !resp.Close {
		t.Fatalf("status %d, Connection: close %v; want 429 and close", resp.StatusCode, resp.Close)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the answer took %v; want it by client_body_timeout (1s)", took)
	}
}

// TestRefusedBodyShed: a request whose body would stream to its upstream
// (request_buffering = false), shed by the upstream's concurrency limit
// (503) before its declared body comes, is answered by
// client_body_timeout too, with Connection: close. (A buffered body is
// read before the slot is asked for: it ends in 408 by then.)
func TestRefusedBodyShed(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		<-release
	}))
	t.Cleanup(up.Close) // last: cleanups run last first
	cfg, err := config.Parse("shed.toml", fmt.Appendf(nil, `[server]
client_body_timeout = "1s"
[[upstream]]
name = "app"
targets = [%q]
request_buffering = false
  [upstream.concurrency]
  limit = 1
  queue = 0
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, up.URL))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(set, Options{}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // first: srv.Close waits for the held request
	go func() {
		if resp, err := http.Get(srv.URL + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the upstream")
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	begin := time.Now()
	io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\nabc")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer after %v: %v", time.Since(begin), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503 (shed)", resp.StatusCode)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the answer took %v; want it by client_body_timeout (1s)", took)
	}
	if !resp.Close {
		t.Errorf("status %d without Connection: close; the rest of the body is not read", resp.StatusCode)
	}
}
