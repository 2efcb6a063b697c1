package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// bodyEnv is a proxy with a generous limit in front of an upstream that
// counts its open connections and the requests it is serving.
type bodyEnv struct {
	addr     string
	up       *httptest.Server
	conns    atomic.Int64 // open upstream connections now
	maxConns atomic.Int64 // most at once while watched
	serving  atomic.Int64 // requests in the upstream's handler now
	requests atomic.Int64
	bodies   chan []byte
}

func startBody(t *testing.T, server, upstream string, handler http.HandlerFunc) *bodyEnv {
	t.Helper()
	e := &bodyEnv{bodies: make(chan []byte, 1000)}
	e.up = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.serving.Add(1)
		defer e.serving.Add(-1)
		e.requests.Add(1)
		if handler != nil {
			handler(w, r)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		e.bodies <- b
		fmt.Fprintf(w, "got %d", len(b))
	}))
	e.up.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n := e.conns.Add(1)
			for {
				m := e.maxConns.Load()
				if n <= m || e.maxConns.CompareAndSwap(m, n) {
					break
				}
			}
		case http.StateClosed, http.StateHijacked:
			e.conns.Add(-1)
		}
	}
	e.up.Start()
	t.Cleanup(e.up.Close)
	src := "[server]\n" + server + "\n[[upstream]]\nname = \"up\"\ntargets = [\"" + e.up.URL + "\"]\n" + upstream + `
[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100000/s"
`
	cfg, err := config.Parse("body.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(e.up.URL)
	cfg.Upstreams[0].Targets = []*url.URL{target}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.addr = newTestServer(t, New(set, Options{}))
	return e
}

// raw sends a request's head and then body, and returns the response.
func (e *bodyEnv) raw(t *testing.T, head string, body ...string) (*http.Response, error) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, head)
	for _, b := range body {
		io.WriteString(c, b)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestSlowUploaders: 200 clients sending their bodies a byte at a time hold
// no upstream connection while they send; each request reaches the
// upstream whole, once its body is in — also when they label the body
// gRPC (no request header turns buffering off; TestH2TricklersBuffered in
// cmd/limitproxy/internal/server does the same over HTTP/2).
func TestSlowUploaders(t *testing.T) {
	for _, ct := range []string{"", "Content-Type: application/grpc\r\n", "Content-Type: application/grpc+proto\r\n"} {
		t.Run(strings.TrimSpace(ct), func(t *testing.T) {
			t.Parallel() // each its own proxy and upstream; the time is the clients' pacing
			slowUploaders(t, ct)
		})
	}
}

func slowUploaders(t *testing.T, header string) {
	e := startBody(t, "", "", nil)
	const clients, size = 200, 10
	var wg sync.WaitGroup
	started := make(chan struct{})
	statuses := make(chan int, clients)
	var halfway sync.WaitGroup // every client halfway through its body
	halfway.Add(clients)
	sampled := make(chan struct{}) // the second halves wait for the sample
	for range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				halfway.Done()
				statuses <- 0
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n", header, size)
			<-started
			for i := range size {
				if i == size/2 {
					halfway.Done()
					<-sampled
				}
				c.Write([]byte("x"))
				time.Sleep(100 * time.Millisecond) // a slow client on a real socket: the pacing is the test
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	close(started)
	// While every client is still sending (each takes about a second),
	// the upstream has no connection at all: sampled once every client is
	// halfway through, none further (a connection made earlier is counted
	// in maxConns), before they send the rest.
	mid := make(chan struct{})
	go func() { halfway.Wait(); close(mid) }()
	select {
	case <-mid:
	case <-time.After(20 * time.Second):
		close(sampled)
		t.Fatal("the clients never got halfway through their bodies")
	}
	during := e.maxConns.Load()
	close(sampled)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("a slow upload got %d, want 200", s)
		}
	}
	t.Logf("%d slow uploaders: most upstream connections open while they sent: %d; requests forwarded after: %d", clients, during, e.requests.Load())
	if during != 0 {
		t.Errorf("%d upstream connections open while %d clients were still sending; want 0", during, clients)
	}
	if n := e.requests.Load(); n != clients {
		t.Errorf("upstream got %d requests, want %d", n, clients)
	}
}

// TestClientBodyTimeout: a client that stops sending its body is answered
// 408 after client_body_timeout, and the upstream never sees it; with
// request buffering off too (the upstream then sees the start of it).
func TestClientBodyTimeout(t *testing.T) {
	t.Parallel()
	for _, buffering := range []bool{true, false} {
		t.Run(fmt.Sprint("buffering=", buffering), func(t *testing.T) {
			e := startBody(t, `client_body_timeout = "300ms"`, fmt.Sprint("request_buffering = ", buffering), nil)
			begin := time.Now()
			resp, err := e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", "abc")
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(begin)
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("stalled body: %d, want 408", resp.StatusCode)
			}
			if took < 300*time.Millisecond || took > 5*time.Second {
				t.Errorf("answered after %v, want about 300ms", took)
			}
			if buffering && e.requests.Load() != 0 {
				t.Errorf("the upstream saw %d requests", e.requests.Load())
			}
			// The target is still up: a good request gets through.
			resp, err = e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n", "abc")
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("after the stall: %v %v, want 200", resp, err)
			}
		})
	}
}

// TestMinBodyRate: an HTTP/1.1 body trickling a byte every 100ms (10
// bytes/s, under min_body_rate 1000 over 500ms) is answered 408 about
// 0.5s/(1-0.01) after it began — long before client_body_timeout (60s),
// which the trickle never trips — whether buffered (the upstream then
// never sees it) or streamed.
func TestMinBodyRate(t *testing.T) {
	t.Parallel()
	for _, buffering := range []bool{true, false} {
		t.Run(fmt.Sprint("buffering=", buffering), func(t *testing.T) {
			e := startBody(t, "", fmt.Sprintf("request_buffering = %v\nmin_body_rate = 1000\nbody_rate_window = \"500ms\"", buffering), nil)
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			begin := time.Now()
			io.WriteString(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for range 100 {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			took := time.Since(begin)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "min_body_rate") {
				t.Errorf("trickled body: %d %s, want 408 naming min_body_rate", resp.StatusCode, b)
			}
			// The window, plus timer and loopback scheduling on a busy
			// machine, generously; far below the 10s the trickle takes.
			if took < 450*time.Millisecond || took > 5*time.Second {
				t.Errorf("answered after %v, want about 505ms", took)
			}
			if buffering && e.requests.Load() != 0 {
				t.Errorf("the upstream saw %d requests of a buffered body never completed", e.requests.Load())
			}
		})
	}
}

// TestMaxBodyBytes: a body over max_body_bytes is 413, declared or not, and
// never forwarded whole.
func TestMaxBodyBytes(t *testing.T) {
	for _, buffering := range []bool{true, false} {
		t.Run(fmt.Sprint("buffering=", buffering), func(t *testing.T) {
			e := startBody(t, "", fmt.Sprint("max_body_bytes = 100\nrequest_buffering = ", buffering), nil)
			resp, err := e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n", strings.Repeat("x", 101))
			if err != nil || resp.StatusCode != 413 {
				t.Errorf("Content-Length 101: %v %v, want 413", resp, err)
			}
			resp, err = e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "64\r\n"+strings.Repeat("x", 100)+"\r\n", "1\r\nx\r\n0\r\n\r\n")
			if err != nil || resp.StatusCode != 413 {
				t.Errorf("chunked 101 bytes: %v %v, want 413", resp, err)
			}
			resp, err = e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", strings.Repeat("x", 100))
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("100 bytes: %v %v, want 200", resp, err)
			}
			for len(e.bodies) > 0 {
				if b := <-e.bodies; len(b) > 100 {
					t.Errorf("the upstream got a body of %d bytes", len(b))
				}
			}
		})
	}
}

// TestBodySpill: a body larger than the memory buffer goes through a
// temporary file, reaches the upstream byte for byte with a Content-Length,
// and leaves no file behind.
func TestBodySpill(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var gotLength atomic.Int64
	var gotTE atomic.Value
	e := startBody(t, "", "", func(w http.ResponseWriter, r *http.Request) {
		gotLength.Store(r.ContentLength)
		gotTE.Store(fmt.Sprint(r.TransferEncoding))
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	body := bytes.Repeat([]byte("0123456789abcdef"), 20000)                                                          // 320 kB
	resp, err := http.Post("http://"+e.addr+"/x", "application/octet-stream", io.MultiReader(bytes.NewReader(body))) // chunked
	if err != nil {
		t.Fatal(err)
	}
	echo, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(echo, body) {
		t.Errorf("spilled body: %d, %d bytes back, want 200 and the %d sent", resp.StatusCode, len(echo), len(body))
	}
	if gotLength.Load() != int64(len(body)) || gotTE.Load() != "[]" {
		t.Errorf("upstream saw Content-Length %d, Transfer-Encoding %v; want %d and none", gotLength.Load(), gotTE.Load(), len(body))
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "limitproxy-body-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Fatal(err)
	}
}

// TestMalformedBody: a malformed chunked body is the client's 400 and never
// marks the upstream down (max_fails is 3; ten are sent).
func TestMalformedBody(t *testing.T) {
	for _, buffering := range []bool{true, false} {
		t.Run(fmt.Sprint("buffering=", buffering), func(t *testing.T) {
			e := startBody(t, "", fmt.Sprint("max_fails = 3\nrequest_buffering = ", buffering), nil)
			for i := range 10 {
				resp, err := e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nabc\r\nzz\r\n\r\n")
				if err != nil || resp.StatusCode != 400 {
					t.Fatalf("malformed body %d: %v %v, want 400", i, resp, err)
				}
			}
			resp, err := e.raw(t, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n", "abc")
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("good request after the malformed ones: %v %v, want 200 (the target is up)", resp, err)
			}
		})
	}
}

// TestSendTimeout: clients that stop reading a large response are cut
// after send_timeout, and the upstream's connections are released.
func TestSendTimeout(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 8<<20)
	e := startBody(t, `send_timeout = "500ms"`, "", func(w http.ResponseWriter, r *http.Request) {
		w.Write(big)
	})
	const clients = 20
	for range clients {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(4096)
		io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	}
	// Polled: a real connection's state, no event to wait on.
	if !poll.Until(15*time.Second, func() bool { return e.requests.Load() >= clients && e.serving.Load() == 0 }) {
		t.Fatalf("after 15s: %d of %d requests reached the upstream, %d still being served to clients that do not read", e.requests.Load(), clients, e.serving.Load())
	}
}
