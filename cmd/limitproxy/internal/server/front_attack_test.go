package server

// Attacks on the HTTP/1.1 front (internal/h1) as the proxy's plain-HTTP
// listener serves it: raw sockets, hand-written bytes, a full server from
// a configuration text. Each test holds the front to HTTP/1.1 and to what
// the proxy documents; where the bytes can be forced through net/http (a
// request with a body before them on the same connection hands the
// connection over), the two readings are compared.

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
)

// faUpstream answers "ok:METHOD PATH BODY" at once, except /slow, which
// it holds until release is closed (or the request is cancelled, which it
// reports on cancelled). It records every path it saw, in order.
type faUpstream struct {
	url       string
	arrived   chan string
	cancelled chan string
	release   chan struct{}
	once      sync.Once

	mu   sync.Mutex
	seen []string
}

func startFAUpstream(t *testing.T) *faUpstream {
	t.Helper()
	u := &faUpstream{arrived: make(chan string, 64), cancelled: make(chan string, 64), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r.URL.Path)
		u.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/slow") {
			u.arrived <- r.URL.Path
			select {
			case <-u.release:
			case <-r.Context().Done():
				u.cancelled <- r.URL.Path
				return
			case <-time.After(15 * time.Second):
			}
		}
		fmt.Fprintf(w, "ok:%s %s %s", r.Method, r.URL.Path, b)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(u.releaseAll) // before srv.Close: cleanups run last first
	u.url = srv.URL
	return u
}

func (u *faUpstream) releaseAll() { u.once.Do(func() { close(u.release) }) }

func (u *faUpstream) paths() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func (u *faUpstream) waitArrived(t *testing.T, path string) {
	t.Helper()
	select {
	case p := <-u.arrived:
		if p != path {
			t.Fatalf("upstream got %s, want %s", p, path)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the upstream", path)
	}
}

// faConfig is a configuration for the proxy on 127.0.0.1:0 in front of
// upstream, with extra [server] lines and the policies given.
func faConfig(upstream, server, policies string) string {
	return "[server]\nlisten = \"127.0.0.1:0\"\n" + server +
		"[admin]\nlisten = \"\"\n[log]\nlevel = \"error\"\n" +
		"[[upstream]]\nname = \"up\"\ntargets = [\"" + upstream + "\"]\n" + policies
}

// faOpen is a policy that lets everything through.
const faOpen = "[[policy]]\nname = \"all\"\nupstream = \"up\"\nkey = []\n  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"1000/s\"\n  burst = 1000\n"

func faDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	return c
}

func faWrite(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// faRead reads one response (to a request of method) and its body; a nil
// response and the error when there is none.
// faOnePerHour is a policy's one limit: a request an hour, burst 1.
const faOnePerHour = "  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"1/h\"\n  burst = 1\n"

// faHandOff is a request with a body: the front hands its connection,
// and what follows on it, to net/http.
const faHandOff = "POST /handoff HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"

// faSendEither sends prefix (a PROXY header, or nothing) and the GET
// request head on a new connection to addr, behind faHandOff if
// viaNetHTTP (so that net/http reads head, not the front), and returns
// the GET's status.
func faSendEither(t *testing.T, addr, prefix, head string, viaNetHTTP bool) int {
	t.Helper()
	c := faDial(t, addr)
	br := bufio.NewReader(c)
	if !viaNetHTTP {
		faWrite(t, c, prefix+head)
	} else {
		faWrite(t, c, prefix+faHandOff+head)
		if resp, _, err := faRead(br, "POST"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("the request handing off: %v %v", resp, err)
		}
	}
	resp, _, err := faRead(br, "GET")
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	return resp.StatusCode
}

func faRead(br *bufio.Reader, method string) (*http.Response, string, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// TestFrontAttackPipelineSmuggle: one write carries five pipelined
// requests: the first served by the front, the second a POST whose body
// is a whole request head (which hands the connection to net/http), then
// three more, the last with Connection: close, and one after it. Every
// request is counted exactly once by a shared limit of 3: 200, 200, 200,
// 429, 429, in order, then the connection closes with nothing for the
// request after the close; the upstream sees /a, /b, /c and never the
// head inside /b's body.
func TestFrontAttackPipelineSmuggle(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	addr := startServer(t, "fa.toml", faConfig(up.url, "",
		"[[policy]]\nname = \"three\"\nupstream = \"up\"\nkey = []\n  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"3/h\"\n  burst = 3\n")).Proxy.String()
	smuggled := "GET /smug HTTP/1.1\r\nHost: a\r\n\r\n"
	reqs := "GET /a HTTP/1.1\r\nHost: a\r\n\r\n" +
		fmt.Sprintf("POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled) +
		"GET /c HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n" +
		"GET /d HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET /e HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" +
		"GET /f HTTP/1.1\r\nHost: a\r\n\r\n" // after a close: never answered
	c := faDial(t, addr)
	faWrite(t, c, reqs)
	br := bufio.NewReader(c)
	want := []struct {
		status int
		body   string
	}{{200, "ok:GET /a "}, {200, "ok:POST /b " + smuggled}, {200, "ok:GET /c "}, {429, ""}, {429, ""}}
	for i, w := range want {
		resp, body, err := faRead(br, "GET")
		if err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		if resp.StatusCode != w.status || w.body != "" && body != w.body {
			t.Errorf("response %d: %d %q, want %d %q", i+1, resp.StatusCode, body, w.status, w.body)
		}
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("bytes after the last (Connection: close) answer: %d, %v", n, err)
	}
	if got := strings.Join(up.paths(), " "); got != "/a /b /c" {
		t.Errorf("upstream saw %q, want %q", got, "/a /b /c")
	}
}

// TestFrontAttackSameKeyBothReadings: the same request head keys and
// matches alike whether the front reads it or net/http does (forced by a
// request with a body before it on the connection): odd case, spacing
// and repetition in the key's header, a Host in upper case with a port.
// The first of two identical requests, by either reader, spends the key's
// one request; the second, by the other, is refused.
func TestFrontAttackSameKeyBothReadings(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	addr := startServer(t, "fa.toml", faConfig(up.url, "",
		"[[policy]]\nname = \"k\"\nupstream = \"up\"\nmatch = { path_prefix = \"/k\", methods = [\"GET\"] }\nkey = [\"header:X-Api-Key\", \"host\"]\n"+
			faOnePerHour+faOpen)).Proxy.String()
	for i, h := range []string{
		"GET /k HTTP/1.1\r\nHost: a\r\nx-api-key: \t K1 \t\r\n\r\n",
		"GET /k/x?q=1 HTTP/1.1\r\nX-API-KEY: K2\r\nx-api-key: other\r\nHost: A.example:80\r\n\r\n",
		"GET /k HTTP/1.1\r\nHost: a\r\nX-Api-Key: K3\r\nPragma: no-cache\r\nConnection: keep-alive\r\n\r\n",
	} {
		first := i%2 == 0 // alternate which reader goes first
		if got := faSendEither(t, addr, "", h, first); got != 200 {
			t.Errorf("%q (net/http %v) first: %d, want 200", h, first, got)
		}
		if got := faSendEither(t, addr, "", h, !first); got != 429 {
			t.Errorf("%q (net/http %v) second: %d, want 429: keyed or matched apart from the first reading", h, !first, got)
		}
	}
}

// TestFrontAttackProxyProtoBothReadings: with proxy_protocol, the client
// a connection's PROXY header names is the key whichever server reads
// the request, and a LOCAL header (the balancer's own connection) makes
// no forwarding header believed, on a connection handed to net/http too
// (its ConnContext must see the *proxyproto.Conn under the front's
// wrapper): a client cannot walk around its limit by sending a body
// first and a fresh X-Forwarded-For each time.
func TestFrontAttackProxyProtoBothReadings(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	addr := startServer(t, "fa.toml", faConfig(up.url, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
		"[[policy]]\nname = \"get\"\nupstream = \"up\"\nmatch = { methods = [\"GET\"] }\nkey = [\"ip\"]\n"+
			faOnePerHour+faOpen)).Proxy.String()
	local := v2(0x20, 0x00, netip.AddrPort{}, netip.AddrPort{})
	for i, tc := range []struct {
		name       string
		header     []byte
		viaNetHTTP bool
		want       int
	}{
		{"carried, front", v1("203.0.113.5"), false, 200},
		{"carried, net/http", v1("203.0.113.5"), true, 429},
		{"carried, net/http first", v1("203.0.113.6"), true, 200},
		{"carried, front second", v1("203.0.113.6"), false, 429},
		{"LOCAL, net/http", local, true, 200}, // keyed 127.0.0.1
		{"LOCAL, net/http, new XFF", local, true, 429},
		{"LOCAL, front, new XFF", local, false, 429},
	} {
		get := fmt.Sprintf("GET /g HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 198.51.100.%d\r\n\r\n", i+1)
		if got := faSendEither(t, addr, string(tc.header), get, tc.viaNetHTTP); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFrontAttackWatchByteKept: while a forwarded request waits for the
// upstream (its connection watched), the client sends its next request in
// two writes; the watch's one byte must stay the next request's first,
// and that request must be answered, and counted, as sent.
func TestFrontAttackWatchByteKept(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	addr := startServer(t, "fa.toml", faConfig(up.url, "", faOpen)).Proxy.String()
	c := faDial(t, addr)
	br := bufio.NewReader(c)
	faWrite(t, c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	up.waitArrived(t, "/slow")
	faWrite(t, c, "G")
	time.Sleep(100 * time.Millisecond) // the watch has read the G by now (not needed to fail)
	faWrite(t, c, "ET /next HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	up.releaseAll()
	for _, want := range []string{"ok:GET /slow ", "ok:GET /next "} {
		resp, body, err := faRead(br, "GET")
		if err != nil {
			t.Fatalf("want %q: %v", want, err)
		}
		if resp.StatusCode != 200 || body != want {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
}

// TestFrontAttackHalfClosed: a client that sends its request and shuts
// down its side (printf … | nc -N). Refused at once, it gets its 429 (it
// can still read). Forwarded, it is a client gone, as net/http reports
// it: the upstream's request is cancelled at once and the client gets no
// answer at all, not an empty 200 (TestHalfClosedClientGetsNoAnswer,
// there under net/http's server).
func TestFrontAttackHalfClosed(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	addr := startServer(t, "fa.toml", faConfig(up.url, "",
		"[[policy]]\nname = \"none\"\nupstream = \"up\"\nmatch = { path_prefix = \"/none\" }\nkey = []\n"+faOnePerHour+faOpen)).Proxy.String()
	halfClosed := func(req string) []byte {
		c := faDial(t, addr)
		faWrite(t, c, req)
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(8 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("%q: read: %v (got %q)", req, err, got)
		}
		return got
	}
	// Spend /none's one request, then be refused half-closed.
	c := faDial(t, addr)
	faWrite(t, c, "GET /none HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	io.ReadAll(c)
	got := halfClosed("GET /none HTTP/1.1\r\nHost: a\r\n\r\n")
	if !strings.HasPrefix(string(got), "HTTP/1.1 429 ") {
		t.Errorf("refused, half-closed: got %q, want its 429", got)
	}
	start := time.Now()
	got = halfClosed("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	if len(got) != 0 {
		t.Errorf("forwarded, half-closed: got an answer %q, want the connection closed without one", got)
	}
	select {
	case <-up.cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the upstream's request was not cancelled when the client went away")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("client gone noticed after %v", d)
	}
}

// TestFrontAttackMaxConnections: connections the front serves, hands to
// net/http, or that end mid-head give their place under max_connections
// back when they close, and the bound still holds: with 2, a third
// connection at once is answered 503 and closed.
func TestFrontAttackMaxConnections(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	addr := startServer(t, "fa.toml", faConfig(up.url, "max_connections = 2\n", faOpen)).Proxy.String()
	for i := range 8 {
		c := faDial(t, addr)
		switch i % 4 {
		case 0:
			faWrite(t, c, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		case 1:
			faWrite(t, c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
		case 2:
			faWrite(t, c, "GET / HTTP/1.1\r\nHo") // half a head, then gone
		case 3:
			faWrite(t, c, "GET / HTTP/1.0\r\n\r\n") // net/http's
		}
		if i%4 == 2 {
			time.Sleep(20 * time.Millisecond)
			c.Close()
			continue
		}
		if b, _ := io.ReadAll(c); !strings.HasPrefix(string(b), "HTTP/1.") {
			t.Fatalf("connection %d: no answer: %q", i, b)
		}
		c.Close()
	}
	// Two kept open (one of the front's, one of net/http's)...
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
	} {
		// (Polled: the places of the connections above come back when
		// the server has closed them, a moment after the client saw it.)
		var c net.Conn
		ok := poll.Until(5*time.Second, func() bool {
			c2, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return false
			}
			c2.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c2, req)
			resp, _, err := faRead(bufio.NewReader(c2), "GET")
			if err != nil || resp.StatusCode != 200 {
				c2.Close()
				return false
			}
			c = c2
			return true
		})
		if !ok {
			t.Fatalf("no place under max_connections = 2 for %q: the places of closed connections were not given back", req)
		}
		t.Cleanup(func() { c.Close() })
	}
	// ...and a third is refused.
	c := faDial(t, addr)
	faWrite(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, _, err := faRead(bufio.NewReader(c), "GET")
	if err != nil || resp.StatusCode != 503 {
		t.Errorf("a third connection with 2 open: %v %v, want 503", resp, err)
	}
}

// faListener is how a test reaches the proxy: on plain HTTP (the front)
// or under TLS (net/http's server alone, as before the front: the
// control). server is its [server] lines, dial opens a connection,
// handshake done.
type faListener struct {
	name   string
	server string
	dial   func(t *testing.T, addr string) net.Conn
}

func faListeners(t *testing.T) []faListener {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM, cert := selfSigned(t, 1)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return []faListener{
		{name: "http", dial: faDial},
		{name: "tls", server: fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile),
			dial: func(t *testing.T, addr string) net.Conn {
				t.Helper()
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				c.SetDeadline(time.Now().Add(15 * time.Second))
				return c
			}},
	}
}

// TestFrontAttackReadHeaderTimeout: read_header_timeout is "time a client
// has to send its request head (slowloris guard)" (configuration.md), as
// net/http counts it: from the start of the connection's first request.
// A client that sends the first bytes of its head just before it runs
// out, and then trickles a field line now and then, is cut off then
// ("tls": net/http's server alone, the control, at 1.0 s), not given a
// second read_header_timeout.
//
// Found in review: the front used to wait read_header_timeout for its
// one read, then hand the partial head to net/http, which set a
// read_header_timeout of its own from then: a slowloris held each
// connection (and its place under max_connections) for up to twice the
// bound, 1.9 s for 1 s. The front now reads the rest of a head itself
// within the same deadline (and caps net/http's for a head larger than
// its buffer).
//
// A head larger than the front's 8 KiB buffer (the "big" cases) is
// net/http's to finish reading, within the deadline the front gave it:
// without that cap, net/http's own read_header_timeout began again.
func TestFrontAttackReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	var big strings.Builder
	for i := 0; big.Len() < 9000; i++ {
		fmt.Fprintf(&big, "X-Pad-%d: %s\r\n", i, strings.Repeat("p", 90))
	}
	for _, l := range faListeners(t) {
		for _, size := range []string{"small", "big"} {
			t.Run(l.name+"/"+size, func(t *testing.T) {
				t.Parallel()
				up := startFAUpstream(t)
				addr := startServer(t, "fa.toml", faConfig(up.url, "read_header_timeout = \"1s\"\n"+l.server, faOpen)).Proxy.String()
				c := l.dial(t, addr)
				start := time.Now()
				closed := make(chan time.Duration, 1)
				go func() {
					io.Copy(io.Discard, c) // EOF or a reset: the server gave up
					closed <- time.Since(start)
				}()
				time.Sleep(900 * time.Millisecond)
				head := "GET / HTTP/1.1\r\nHost: a\r\n"
				if size == "big" {
					head += big.String()
				}
				io.WriteString(c, head)
				var took time.Duration
			trickle:
				for i := 0; i < 30; i++ {
					select {
					case took = <-closed:
						break trickle
					case <-time.After(100 * time.Millisecond):
						io.WriteString(c, fmt.Sprintf("X-Slow-%d: a\r\n", i))
					}
				}
				if took == 0 {
					t.Fatalf("a head trickled for %v was never cut off (read_header_timeout = 1s)", time.Since(start))
				}
				if took > 1600*time.Millisecond {
					t.Errorf("a head trickled from 0.9 s was cut off %v after the connection began; read_header_timeout is 1s", took)
				}
			})
		}
	}
}

// TestFrontAttackUpgradeTunnelHalfClose: an upgraded connection is a
// tunnel, and a tunnel carries a half-close: when the upstream is done
// sending (a FIN) but still reads, httputil.ReverseProxy half-closes the
// client's side (the recorder's Hijack keeps CloseWrite for that), and
// the client, having read EOF, may still send its last bytes, which must
// reach the upstream. So it was on plain HTTP before the front, and so it
// is under TLS (the "tls" subtest: net/http's server alone, the control).
//
// Found in review: upgrades were handed to net/http in a wrapper that
// hid the connection's CloseWrite, so ReverseProxy (Go 1.26) ended the
// tunnel with errCopyDone and closed the client's connection outright:
// what the client sent after the upstream's FIN never reached the
// upstream. A handed connection keeps CloseWrite now.
func TestFrontAttackUpgradeTunnelHalfClose(t *testing.T) {
	t.Parallel()
	// The upstream answers the handshake, sends one text frame and
	// half-closes: it sends no more, and reads what the client sends.
	got := make(chan []byte, 1)
	wsUp := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n\x81\x03bye",
			base64.StdEncoding.EncodeToString(sum[:]))
		brw.Flush()
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(brw.Reader) // to the client's EOF
		got <- b
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go wsUp.Serve(ln)
	t.Cleanup(func() { wsUp.Close() })
	upstream := "http://" + ln.Addr().String()

	run := func(t *testing.T, c net.Conn, closeWrite func() error) {
		c.SetDeadline(time.Now().Add(15 * time.Second))
		faWrite(t, c, "GET /chat HTTP/1.1\r\nHost: ws.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("handshake: %v %v, want 101", resp, err)
		}
		if _, payload, err := readFrame(br); err != nil || string(payload) != "bye" {
			t.Fatalf("frame: %q %v, want bye", payload, err)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("after the upstream's FIN: read %d, %v; want EOF", n, err)
		}
		// The client's last frame (masked "ok"), then its own FIN.
		last := []byte{0x81, 0x82, 1, 2, 3, 4, 'o' ^ 1, 'k' ^ 2}
		c.Write(last)
		closeWrite()
		select {
		case b := <-got:
			if string(b) != string(last) {
				t.Errorf("the upstream read %q after its FIN, want the client's last frame %q: the tunnel was closed, not half-closed", b, last)
			}
		case <-time.After(10 * time.Second):
			t.Error("the upstream never saw the client's FIN")
		}
	}
	for _, l := range faListeners(t) {
		t.Run(l.name, func(t *testing.T) {
			addr := startServer(t, "fa.toml", faConfig(upstream, l.server, faOpen)).Proxy.String()
			c := l.dial(t, addr)
			run(t, c, c.(interface{ CloseWrite() error }).CloseWrite)
		})
	}
}

// TestFrontAttackSendTimeout: a client that pipelines requests and never
// reads an answer holds its connection (and, forwarded, its upstream)
// only as long as send_timeout, "most time between two writes of a
// response to the client; then it is cut" (configuration.md): the front
// writes its answers under the write deadline the proxy gives each
// response, as net/http's server did.
func TestFrontAttackSendTimeout(t *testing.T) {
	t.Parallel()
	up := startFAUpstream(t)
	refuse := "[[policy]]\nname = \"all\"\nupstream = \"up\"\nkey = []\n" + faOnePerHour
	addr := startServer(t, "fa.toml", faConfig(up.url, "send_timeout = \"1s\"\n", refuse)).Proxy.String()
	c := faDial(t, addr)
	c.SetDeadline(time.Time{})
	// Requests, refused at once, until the answers nobody reads fill
	// the socket buffers and the proxy's writes block; then the proxy
	// must give up within send_timeout of its last write that went
	// through, and close: the next writes here fail.
	batch := []byte(strings.Repeat("GET / HTTP/1.1\r\nHost: a\r\n\r\n", 200))
	start := time.Now()
	var lastOK time.Time
	for time.Since(start) < 20*time.Second {
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := c.Write(batch)
		if err == nil {
			lastOK = time.Now()
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue // both directions full: the proxy is blocked on its write
		}
		// Closed by the proxy. Its last write went through at most a
		// little after our last write did.
		if took := time.Since(lastOK); took > 6*time.Second {
			t.Errorf("the proxy closed the connection %v after our last write went through; send_timeout is 1s", took)
		}
		return
	}
	t.Fatalf("a client that reads nothing still had its connection after %v (send_timeout = 1s)", time.Since(start))
}
