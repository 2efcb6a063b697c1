package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/policy/config"
)

// A raw upstream that answers each request with canned bytes, so that
// both transports see exactly the same response shapes, well-formed or
// not.
type rawUpstream struct {
	ln    net.Listener
	conns atomic.Int64 // connections accepted
	// respond returns the bytes to answer req with, and whether to close
	// the connection afterwards.
	respond func(req *http.Request) (string, bool)
}

func startRawUpstream(t testing.TB, respond func(req *http.Request) (string, bool)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, respond: respond}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			go u.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		out, closeAfter := u.respond(req)
		if _, err := io.WriteString(c, out); err != nil || closeAfter {
			return
		}
	}
}

// outcome is what a client of a transport can observe of one exchange.
type outcome struct {
	Err           bool
	err           string // shown, not compared: the two word errors differently
	Status        int
	Header        http.Header
	Body          string
	BodyErr       bool
	Trailer       http.Header
	ContentLength int64
}

// same compares what a client sees, not how errors are worded.
func same(a, b outcome) bool {
	a.err, b.err = "", ""
	return reflect.DeepEqual(a, b)
}

func observe(rt http.RoundTripper, method, url string) outcome {
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("User-Agent", "") // as ReverseProxy sends it
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return outcome{Err: true, err: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if len(body) > 64 { // compared whole, shown short
		body = fmt.Appendf(body[:32:32], "…(%d bytes, hash %x)", len(body), sha256.Sum256(body))
	}
	return outcome{Status: resp.StatusCode, Header: resp.Header, Body: string(body), BodyErr: err != nil,
		Trailer: resp.Trailer, ContentLength: resp.ContentLength}
}

// responseShapes are the response forms the differential test plays: the
// framings of RFC 9112, informational responses, bodiless statuses, and
// malformed ones.
var responseShapes = []struct {
	name  string
	resp  string
	close bool // the upstream closes the connection after answering
}{
	{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false},
	{"content-length-0", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
	{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", false},
	{"chunked-trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n", false},
	{"chunked-extensions", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n", false},
	{"close-delimited", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", true},
	{"connection-close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true},
	{"http-1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", true},
	{"http-1.0-keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", false},
	{"100-then-200", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"103-then-200", "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"204", "HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n", false},
	{"150-then-200", "HTTP/1.1 150 X\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"1xx-then-close", "HTTP/1.1 150 X\r\n\r\n", true},
	{"six-1xx", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 6) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
	{"status-000", "HTTP/1.1 000 Zero\r\n\r\nbody", true},
	// Statuses net/http's server cannot write (issue 35): net/http's
	// client reads the first two as final ones (ReverseProxy's
	// ModifyResponse then refuses them: 502), and refuses the last two
	// itself.
	{"status-099", "HTTP/1.1 099 X\r\nContent-Length: 2\r\n\r\nok", false},
	{"status-plus-99", "HTTP/1.1 +99 X\r\nContent-Length: 2\r\n\r\nok", false},
	{"status-1000", "HTTP/1.1 1000 X\r\nContent-Length: 2\r\n\r\nok", true},
	{"status-minus-1", "HTTP/1.1 -1 X\r\nContent-Length: 2\r\n\r\nok", true},
	{"304-with-length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"x\"\r\n\r\n", false},
	{"404-body", "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found", false},
	{"repeated-headers", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n", false},
	{"large", "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000), false},
	{"conflicting-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", true},
	{"chunked-and-length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	{"bad-chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", true},
	{"short-body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true},
	{"bad-status-line", "HTTP/1.1 OK\r\n\r\n", true},
	{"garbage", "hello there\r\n\r\n", true},
	{"nothing", "", true},
	{"keep-alive-then-closed", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true}, // closed without saying so: stale on reuse
	// Heads at the edges of readSimpleResponse's form (resphead.go).
	{"typical-head", "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Wed, 25 Nov 2026 03:00:00 GMT\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 5\r\nVary: Accept-Encoding\r\nX-Empty:\r\nX-Spaces: \t a b \t\r\n\r\nhello", false},
	{"lower-case-names", "HTTP/1.1 201 Created\r\ncontent-length: 2\r\nx-trace-id: abc\r\nlocation: /n/1\r\n\r\nok", false},
	{"no-reason", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", false},
	{"reason-trailing-space", "HTTP/1.1 500 Oops \r\nContent-Length: 2\r\n\r\nok", false},
	{"status-599", "HTTP/1.1 599 Whatever\r\nContent-Length: 2\r\n\r\nok", false},
	{"status-600", "HTTP/1.1 600 Whatever\r\nContent-Length: 2\r\n\r\nok", false},
	{"pragma", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok", false},
	{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nok", false},
	{"obs-text", "HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\nContent-Length: 2\r\n\r\nok", false},
	{"bare-lf", "HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\r\n\r\nok", false},
	{"bare-lf-end", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok", false},
	{"length-plus", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", true},
	{"length-empty", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nok", true},
	{"length-same-twice", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nok", false},
	{"length-huge", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nok", true},
	{"space-before-colon", "HTTP/1.1 200 OK\r\nX-A : b\r\nContent-Length: 2\r\n\r\nok", true},
	{"control-in-value", "HTTP/1.1 200 OK\r\nX-A: b\x01c\r\nContent-Length: 2\r\n\r\nok", true},
	{"cr-in-value", "HTTP/1.1 200 OK\r\nX-A: b\rc\r\nContent-Length: 2\r\n\r\nok", true},
	{"connection-keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false},
	{"trailer-unchunked", "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nContent-Length: 2\r\n\r\nok", false},
	{"lower-transfer-encoding", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 9\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	{"http-1.1-lower", "http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
}

// TestSyncTransportDifferential: for every shape, GET twice in a row on
// one transport (the second on a kept-alive connection when the first
// allows it), and HEAD on a fresh one, syncTransport and http.Transport
// give the client the same status, header, body, trailers and errors.
// (A request after a HEAD whose answer came with a body is left out:
// http.Transport then races its reading goroutine against the stray bytes
// and answers either way; TestSyncTransportStrayBytes holds syncTransport
// to the right answer.)
func TestSyncTransportDifferential(t *testing.T) {
	quietStdLog(t) // http.Transport logs the unsolicited bytes some shapes send
	for _, s := range responseShapes {
		t.Run(s.name, func(t *testing.T) {
			u := startRawUpstream(t, func(*http.Request) (string, bool) { return s.resp, s.close })
			url := "http://" + u.ln.Addr().String() + "/x"
			for _, methods := range [][]string{{"GET", "GET"}, {"HEAD"}} {
				cfg := config.Upstream{Timeout: 5 * time.Second}
				ours := newSyncTransport(NewTransport(cfg), cfg.Timeout)
				std := NewTransport(cfg)
				std.DisableCompression = true // compression is the Transport's own addition, not framing
				for _, method := range methods {
					got, want := observe(ours, method, url), observe(std, method, url)
					if !same(got, want) {
						t.Errorf("%s:\n syncTransport  %+v\n http.Transport %+v", method, got, want)
					}
				}
				ours.CloseIdleConnections()
				std.CloseIdleConnections()
			}
		})
	}
}

// TestSyncTransportStrayBytes: bytes an upstream sends unasked (a body
// after a HEAD response) never become the next response: the connection
// they arrived on is not reused.
func TestSyncTransportStrayBytes(t *testing.T) {
	u := startRawUpstream(t, func(*http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false
	})
	url := "http://" + u.ln.Addr().String() + "/x"
	tr := newSyncTransport(NewTransport(config.Upstream{Timeout: 5 * time.Second}), 5*time.Second)
	for range 20 {
		if o := observe(tr, "HEAD", url); o.Err || o.Status != 200 || o.Body != "" {
			t.Fatalf("HEAD: %+v", o)
		}
		if o := observe(tr, "GET", url); o.Err || o.Body != "hello" {
			t.Fatalf("GET after a HEAD answered with a body: %+v", o)
		}
	}
}

// quietStdLog discards the standard logger's output for the test.
func quietStdLog(t testing.TB) {
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
}

// TestSyncTransportReuse: kept-alive connections are reused (one
// connection for many sequential requests), a connection whose body was
// not read to its end is not, an idle one past idleTimeout is closed, and
// a stale one is retried once for GET but never for a request that is not
// idempotent.
func TestSyncTransportReuse(t *testing.T) {
	u := startRawUpstream(t, func(*http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false
	})
	url := "http://" + u.ln.Addr().String() + "/x"
	tr := newSyncTransport(NewTransport(config.Upstream{Timeout: 5 * time.Second}), 5*time.Second)
	for range 20 {
		if o := observe(tr, "GET", url); o.Err || o.Body != "hello" {
			t.Fatalf("%+v", o)
		}
	}
	if n := u.conns.Load(); n != 1 {
		t.Errorf("20 requests took %d connections, want 1", n)
	}
	// Closed before its end: that connection is not reused.
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 2))
	resp.Body.Close()
	observe(tr, "GET", url)
	if n := u.conns.Load(); n != 2 {
		t.Errorf("after a body closed half read: %d connections, want 2", n)
	}
	// Idle too long: closed, a new one dialed. (The idle connection is
	// aged by moving its idle instant back past idleTimeout, not by
	// waiting for it.)
	tr.mu.Lock()
	for _, conns := range tr.idle {
		for _, pc := range conns {
			pc.idleAt = pc.idleAt.Add(-tr.idleTimeout)
		}
	}
	tr.mu.Unlock()
	observe(tr, "GET", url)
	if n := u.conns.Load(); n != 3 {
		t.Errorf("after idling past idleTimeout: %d connections, want 3", n)
	}

	// A kept-alive connection the upstream closes as the next request
	// arrives, without answering it (its keep-alive ran out at that
	// moment): GET is sent again on a new connection, once; DELETE is not.
	var got atomic.Int64
	stale := startRawUpstream(t, nil)
	stale.respond = func(r *http.Request) (string, bool) {
		got.Add(1)
		if r.Header.Get("X-Second") != "" {
			return "", true // closes without an answer
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false
	}
	surl := "http://" + stale.ln.Addr().String() + "/x"
	tr2 := newSyncTransport(NewTransport(config.Upstream{Timeout: 5 * time.Second}), 5*time.Second)
	if o := observe(tr2, "GET", surl); o.Err || o.Body != "ok" {
		t.Fatalf("first GET: %+v", o)
	}
	req2, _ := http.NewRequest("GET", surl, nil)
	req2.Header.Set("X-Second", "1")
	if _, err := tr2.RoundTrip(req2); err == nil {
		t.Fatal("the upstream never answers X-Second, yet a response came")
	}
	if n := got.Load(); n != 3 {
		t.Errorf("the GET the upstream dropped reached it %d times, want 2 (sent again once)", n-1)
	}
	observe(tr2, "GET", surl) // a kept-alive connection again
	before := got.Load()
	req3, _ := http.NewRequest("DELETE", surl, nil)
	req3.Header.Set("X-Second", "1")
	if _, err := tr2.RoundTrip(req3); err == nil {
		t.Error("DELETE dropped by the upstream: no error")
	}
	if n := got.Load() - before; n != 1 {
		t.Errorf("DELETE reached the upstream %d times, want once", n)
	}
}

// TestSyncTransportIdleSweep: a connection left idle is closed once it
// has idled idleTimeout, without another request coming (the upstream
// sees its end).
func TestSyncTransportIdleSweep(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		http.ReadRequest(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err == io.EOF {
			close(closed)
		}
	}()
	fallback := NewTransport(config.Upstream{Timeout: 5 * time.Second})
	fallback.IdleConnTimeout = 200 * time.Millisecond
	tr := newSyncTransport(fallback, 5*time.Second)
	if o := observe(tr, "GET", "http://"+ln.Addr().String()+"/x"); o.Err || o.Body != "ok" {
		t.Fatalf("%+v", o)
	}
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("the idle connection was not closed after idleTimeout")
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.idle) != 0 || tr.sweep != nil {
		t.Errorf("after the sweep: %d hosts with idle connections, timer %v", len(tr.idle), tr.sweep)
	}
}

// TestSyncTransportHeaderTimeout: no response head within the timeout is a
// timeout error (504 to the client), not a retry.
func TestSyncTransportHeaderTimeout(t *testing.T) {
	var n atomic.Int64
	release := make(chan struct{})
	u := startRawUpstream(t, func(*http.Request) (string, bool) {
		n.Add(1)
		<-release // slower than the 100ms header timeout: answers only at the test's end
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false
	})
	t.Cleanup(func() { close(release) })
	tr := newSyncTransport(NewTransport(config.Upstream{Timeout: 5 * time.Second}), 100*time.Millisecond)
	// A second send would need a second connection (the first one timed
	// out): counted here, before RoundTrip returns.
	var dials atomic.Int64
	dial := tr.dial
	tr.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	req, _ := http.NewRequest("GET", "http://"+u.ln.Addr().String()+"/x", nil)
	start := time.Now()
	_, err := tr.RoundTrip(req)
	var ne net.Error
	if err == nil || !(asNetError(err, &ne) && ne.Timeout()) {
		t.Fatalf("err %v, want a timeout", err)
	}
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Errorf("took %v, want about the 100ms timeout", d)
	}
	if d := dials.Load(); d != 1 {
		t.Errorf("the request was sent on %d connections, want 1", d)
	}
	poll.For(t, 5*time.Second, func() bool { return n.Load() >= 1 }, "the upstream never got the request")
	if n.Load() != 1 {
		t.Errorf("the request was sent %d times", n.Load())
	}
}

func asNetError(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

// FuzzSyncTransport sends a GET to an upstream that answers with the
// fuzzed bytes and closes, through syncTransport and through
// http.Transport: what the client observes must be the same.
func FuzzSyncTransport(f *testing.F) {
	for _, s := range responseShapes {
		f.Add(s.resp)
	}
	quietStdLog(f)
	f.Fuzz(func(t *testing.T, resp string) {
		u := startRawUpstream(t, func(*http.Request) (string, bool) { return resp, true })
		url := "http://" + u.ln.Addr().String() + "/x"
		cfg := config.Upstream{Timeout: 2 * time.Second}
		ours := newSyncTransport(NewTransport(cfg), cfg.Timeout)
		std := NewTransport(cfg)
		std.DisableCompression = true
		defer ours.CloseIdleConnections()
		defer std.CloseIdleConnections()
		got, want := observe(ours, "GET", url), observe(std, "GET", url)
		if !same(got, want) {
			t.Errorf("response %q:\n syncTransport  %+v\n http.Transport %+v", resp, got, want)
		}
	})
}

// BenchmarkTransport: one GET and its 2-byte body over a kept-alive
// loopback connection, through syncTransport and through http.Transport,
// to the same raw upstream (whose own work and allocations both include).
//
//	go test -run '^$' -bench Transport -benchmem ./proxy
func BenchmarkTransport(b *testing.B) {
	u := startRawUpstream(b, func(*http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false
	})
	url := "http://" + u.ln.Addr().String() + "/x"
	cfg := config.Upstream{Timeout: 5 * time.Second}
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"sync", newSyncTransport(NewTransport(cfg), cfg.Timeout)},
		{"http.Transport", NewTransport(cfg)},
	} {
		b.Run(c.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("User-Agent", "")
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// TestSyncTransportClientGoneMidBody: a client that goes away while the
// upstream stalls in the middle of a body ends the body's read at once,
// as with http.Transport, rather than when the upstream writes again.
func TestSyncTransportClientGoneMidBody(t *testing.T) {
	u := startRawUpstream(t, func(*http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false // then nothing
	})
	tr := newSyncTransport(NewTransport(config.Upstream{Timeout: 5 * time.Second}), 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+u.ln.Addr().String()+"/x", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("the body read ended without an error")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the body read ended %v after the client left, want at once", d)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.idle) != 0 {
		t.Error("the connection of an aborted body went back to the idle pool")
	}
}

// TestSyncTransportHeaderTimeoutSpares: the header timeout bounds the
// head alone. A body that takes longer than it comes whole, and the
// connection, idle longer than it afterwards, serves the next request:
// the timer of one exchange never reaches the body or the next exchange.
func TestSyncTransportHeaderTimeoutSpares(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
			time.Sleep(250 * time.Millisecond) // the rest of the body, well after the 100ms header timeout
			io.WriteString(c, "cd")
		}
	}()
	tr := newSyncTransport(NewTransport(config.Upstream{Timeout: 5 * time.Second}), 100*time.Millisecond)
	defer tr.CloseIdleConnections()
	var dials atomic.Int64
	dial := tr.dial
	tr.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	for i := range 2 {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "abcd" {
			t.Fatalf("request %d: body %q, %v; want abcd", i, body, err)
		}
		time.Sleep(150 * time.Millisecond) // idle past the header timeout
	}
	if d := dials.Load(); d != 1 {
		t.Errorf("two requests took %d connections, want 1 (kept alive)", d)
	}
}
