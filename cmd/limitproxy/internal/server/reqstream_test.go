package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/limitproxy/limitproxy/internal/poll"
)

// The request-body tests speak HTTP/2 in raw frames (x/net/http2's Framer
// and hpack), since a client library would send a body as fast as it can:
// here each stream's HEADERS go out without END_STREAM and the body
// trickles in DATA frames of a byte.

// h2client is one raw HTTP/2 connection to the proxy. Safe for concurrent
// use: writes are serialized, a goroutine reads.
type h2client struct {
	t      *testing.T
	conn   net.Conn
	mu     sync.Mutex // guards fr's writes, enc and buf
	fr     *http2.Framer
	enc    *hpack.Encoder
	buf    bytes.Buffer
	events chan h2event
}

// h2event is a HEADERS frame (its fields) or a RST_STREAM the proxy sent
// on a stream, or (id 0) the end of the connection.
type h2event struct {
	id     uint32
	fields map[string]string
	rst    bool
	at     time.Time
}

// dialH2 opens an HTTP/2 connection to addr: h2c with prior knowledge, or,
// with roots set, TLS with ALPN "h2".
func dialH2(t *testing.T, addr string, tlsConf *tls.Config) *h2client {
	t.Helper()
	var c net.Conn
	var err error
	if tlsConf != nil {
		tc, terr := tls.Dial("tcp", addr, tlsConf)
		if terr == nil && tc.ConnectionState().NegotiatedProtocol != "h2" {
			t.Fatalf("ALPN negotiated %q, want h2", tc.ConnectionState().NegotiatedProtocol)
		}
		c, err = tc, terr
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second))
	h := &h2client{t: t, conn: c, fr: http2.NewFramer(c, c), events: make(chan h2event, 1000)}
	h.enc = hpack.NewEncoder(&h.buf)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(c, http2.ClientPreface)
	h.mu.Lock()
	h.fr.WriteSettings()
	h.mu.Unlock()
	go h.read()
	return h
}

func (h *h2client) read() {
	defer close(h.events)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.mu.Lock()
				h.fr.WriteSettingsAck()
				h.mu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.mu.Lock()
				h.fr.WritePing(true, f.Data)
				h.mu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			fields := map[string]string{}
			for _, hf := range f.Fields {
				fields[hf.Name] = hf.Value
			}
			h.events <- h2event{id: f.StreamID, fields: fields, at: time.Now()}
		case *http2.RSTStreamFrame:
			h.events <- h2event{id: f.StreamID, rst: true, at: time.Now()}
		case *http2.GoAwayFrame:
			h.events <- h2event{rst: true, at: time.Now()}
		}
	}
}

// open starts a POST on stream id with Content-Type ct and no end: its
// body is to come.
func (h *h2client) open(id uint32, path, ct string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "proxy.test"}, {":path", path}, {"content-type", ct}, {"te", "trailers"}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.buf.Bytes(), EndHeaders: true}); err != nil {
		h.t.Errorf("HEADERS on stream %d: %v", id, err)
	}
}

// data sends b on stream id, ending the body if end.
func (h *h2client) data(id uint32, b string, end bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fr.WriteData(id, end, []byte(b))
}

// next returns the next event, failing the test after wait.
func (h *h2client) next(wait time.Duration) h2event {
	h.t.Helper()
	select {
	case e, ok := <-h.events:
		if !ok {
			h.t.Fatal("connection closed")
		}
		return e
	case <-time.After(wait):
		h.t.Fatalf("no frame from the proxy in %v", wait)
	}
	return h2event{}
}

// answer returns the first HEADERS or RST_STREAM on stream id, skipping
// the events of other streams (a RST_STREAM that follows an answer given
// before the body ended, to stop the rest of it), failing after wait.
func (h *h2client) answer(id uint32, wait time.Duration) h2event {
	h.t.Helper()
	end := time.Now().Add(wait)
	for {
		e := h.next(time.Until(end))
		if e.id == id {
			return e
		}
	}
}

// countedUpstream is an HTTP/1.1 upstream that counts its connections
// (open now, most at once) and requests, reads each body whole and answers
// 200 with its length.
type countedUpstream struct {
	*httptest.Server
	conns, maxConns, requests, serving atomic.Int64
	bodyErrs                           atomic.Int64 // bodies that broke off
}

func startCountedUpstream(t *testing.T) *countedUpstream {
	t.Helper()
	u := &countedUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.serving.Add(1)
		defer u.serving.Add(-1)
		u.requests.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			u.bodyErrs.Add(1)
			return
		}
		fmt.Fprintf(w, "got %d", len(b))
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n := u.conns.Add(1)
			for m := u.maxConns.Load(); n > m && !u.maxConns.CompareAndSwap(m, n); m = u.maxConns.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			u.conns.Add(-1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// startBodyProxy runs limitproxy with h2c on its listener (or TLS, with
// tlsTable) in front of up, with upstream settings extra.
func startBodyProxy(t *testing.T, up *countedUpstream, tlsTable, extra string) listening {
	t.Helper()
	return startServer(t, "body.toml", fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
h2c = true
%s
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
access = false
[[upstream]]
name = "up"
targets = [%q]
%s
[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100000/s"
`, tlsTable, up.URL, extra))
}

// tlsFiles writes a self-signed certificate for the proxy and returns its
// [server.tls] table and a client configuration that trusts it and offers
// only h2.
func tlsFiles(t *testing.T) (table string, client *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM, cert := selfSigned(t, 11)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	client = &tls.Config{ServerName: "localhost", NextProtos: []string{"h2"}}
	client.RootCAs = x509.NewCertPool()
	client.RootCAs.AddCert(cert)
	return fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile), client
}

// TestH2TricklersBuffered: 50 HTTP/2 streams trickling their bodies a byte
// a second to an upstream that buffers hold no upstream connection at all,
// whether they are labelled application/grpc or text/plain, over h2c and
// over TLS; once each body ends, each request reaches the upstream whole.
// (The gRPC label used to turn buffering off: each such stream held an
// upstream connection for as long as it trickled.)
func TestH2TricklersBuffered(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"h2c", "tls"} {
		for _, ct := range []string{"application/grpc", "text/plain"} {
			t.Run(transport+"/"+ct, func(t *testing.T) {
				t.Parallel()
				up := startCountedUpstream(t)
				table, client := "", (*tls.Config)(nil)
				if transport == "tls" {
					table, client = tlsFiles(t)
				}
				l := startBodyProxy(t, up, table, "")
				h := dialH2(t, l.Proxy.String(), client)
				const streams, seconds = 50, 3
				for i := range streams {
					h.open(uint32(2*i+1), "/upload", ct)
				}
				// A byte a second on every stream, for three seconds:
				// with buffering, nothing reaches the upstream.
				for range seconds {
					for i := range streams {
						if err := h.data(uint32(2*i+1), "x", false); err != nil {
							t.Fatal(err)
						}
					}
					time.Sleep(time.Second) // a trickler's pace on a real HTTP/2 socket, against body timers on the real clock: the scenario
				}
				during, reqs := up.maxConns.Load(), up.requests.Load()
				t.Logf("%d streams of %s trickling for %ds: most upstream connections %d, requests %d", streams, ct, seconds, during, reqs)
				if during != 0 || reqs != 0 {
					t.Errorf("%d upstream connections (%d requests) while %d streams trickled; want 0", during, reqs, streams)
				}
				for i := range streams {
					h.data(uint32(2*i+1), "x", true)
				}
				for range streams {
					e := h.next(20 * time.Second)
					if e.rst || e.fields[":status"] != "200" {
						t.Fatalf("stream %d: %+v, want 200 once the body ended", e.id, e)
					}
				}
				if n := up.requests.Load(); n != streams {
					t.Errorf("the upstream got %d requests, want %d", n, streams)
				}
			})
		}
	}
}

// TestH2StreamMinRate: to an upstream that takes streamed bodies
// (request_buffering = false), a stream trickling below min_body_rate is
// cut once its window is spent — min_body_rate 1000 bytes/s over 1s and a
// byte every 200ms (5 bytes/s, f = 0.005) is cut after 1s/(1-f), about
// 1.005s — with 408, or DEADLINE_EXCEEDED for a gRPC call, and its
// upstream request ends. client_body_timeout (60s) alone never cut it.
func TestH2StreamMinRate(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"h2c", "tls"} {
		for _, ct := range []string{"application/grpc", "text/plain"} {
			t.Run(transport+"/"+ct, func(t *testing.T) {
				t.Parallel()
				up := startCountedUpstream(t)
				table, client := "", (*tls.Config)(nil)
				if transport == "tls" {
					table, client = tlsFiles(t)
				}
				l := startBodyProxy(t, up, table, "request_buffering = false\nmin_body_rate = 1000\nbody_rate_window = \"1s\"")
				h := dialH2(t, l.Proxy.String(), client)
				begin := time.Now()
				h.open(1, "/upload", ct)
				var answer *h2event
				for answer == nil && time.Since(begin) < 10*time.Second {
					h.data(1, "x", false)
					select {
					case e, ok := <-h.events:
						if !ok {
							t.Fatal("connection closed")
						}
						answer = &e
					case <-time.After(200 * time.Millisecond):
					}
				}
				if answer == nil {
					t.Fatalf("a stream trickling 5 bytes/s was not cut in 10s (min_body_rate 1000 over 1s)")
				}
				took := answer.at.Sub(begin)
				t.Logf("cut after %v: %+v", took, *answer)
				// Lower bound: the window itself. Upper bound: the
				// window, a timer's delay and loopback scheduling on a
				// busy machine, generously.
				if took < 900*time.Millisecond || took > 5*time.Second {
					t.Errorf("cut after %v, want about 1s", took)
				}
				want := map[string]string{":status": "408"}
				if ct == "application/grpc" {
					want = map[string]string{":status": "200", "grpc-status": "4"}
				}
				for k, v := range want {
					if answer.fields[k] != v {
						t.Errorf("answer %+v: %s = %q, want %q", *answer, k, answer.fields[k], v)
					}
				}
				if m := answer.fields["grpc-message"] + answer.fields["content-type"]; ct == "application/grpc" && !strings.Contains(m, "min_body_rate") {
					t.Errorf("grpc-message %q, want it to name min_body_rate", answer.fields["grpc-message"])
				}
				// The upstream saw the stream (it streams) and its request
				// ended with the cut.
				poll.Until(5*time.Second, func() bool { return up.serving.Load() == 0 })
				if up.requests.Load() != 1 || up.serving.Load() != 0 {
					t.Errorf("upstream: %d requests, %d still being served; want 1 and 0", up.requests.Load(), up.serving.Load())
				}
			})
		}
	}
}

// TestH2StreamsPerKey: one client key streams at most max_streams_per_key
// bodies to an upstream that takes streamed bodies: with 3, the fourth
// concurrent stream is refused with 429 and Retry-After (RESOURCE_EXHAUSTED
// with a pushback for a gRPC call) without reaching the upstream, counted
// as stream_refused; once a stream ends, another is admitted.
func TestH2StreamsPerKey(t *testing.T) {
	t.Parallel()
	up := startCountedUpstream(t)
	l := startBodyProxy(t, up, "", "request_buffering = false\nmin_body_rate = 0\nmax_streams_per_key = 3")
	h := dialH2(t, l.Proxy.String(), nil)
	for i := range 3 {
		h.open(uint32(2*i+1), "/upload", "text/plain")
		h.data(uint32(2*i+1), "x", false)
	}
	poll.Until(10*time.Second, func() bool { return up.serving.Load() == 3 })
	if n := up.serving.Load(); n != 3 {
		t.Fatalf("the upstream serves %d streams, want the 3 allowed", n)
	}
	for _, c := range []struct {
		id     uint32
		ct     string
		fields map[string]string
	}{
		{7, "text/plain", map[string]string{":status": "429", "retry-after": "1"}},
		{9, "application/grpc", map[string]string{":status": "200", "grpc-status": "8", "grpc-retry-pushback-ms": "1000"}},
	} {
		h.open(c.id, "/upload", c.ct)
		h.data(c.id, "x", false)
		e := h.answer(c.id, 10*time.Second)
		for k, v := range c.fields {
			if e.id != c.id || e.fields[k] != v {
				t.Errorf("stream %d (%s) over the bound: %+v; want %s = %q", c.id, c.ct, e, k, v)
			}
		}
	}
	if n := up.requests.Load(); n != 3 {
		t.Errorf("the upstream got %d requests, want the 3 allowed", n)
	}
	if m := scrape(t, l.Admin.String()); !strings.Contains(m, `limitproxy_requests_total{decision="stream_refused",policy="all"} 2`) {
		t.Errorf("metrics lack 2 stream_refused:\n%s", grepLines(m, "limitproxy_requests_total"))
	}
	// One stream ends: its place is free again.
	h.data(1, "", true)
	if e := h.answer(1, 10*time.Second); e.fields[":status"] != "200" {
		t.Fatalf("stream 1 ended: %+v, want 200", e)
	}
	h.open(11, "/upload", "text/plain")
	h.data(11, "y", true)
	if e := h.answer(11, 10*time.Second); e.fields[":status"] != "200" {
		t.Errorf("a stream after one ended: %+v, want 200", e)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
