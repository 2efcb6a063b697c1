package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// halfCloseServer runs the proxy face (its HTTP/1.1 front) before an
// upstream that answers /slow after 300 ms, /big with 8 MB, anything
// else at once, each with its path and the length of the body it got;
// send_timeout is 500 ms.
func halfCloseServer(t *testing.T) string {
	t.Helper()
	big := strings.Repeat("x", 8<<20)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/slow":
			select {
			case <-r.Context().Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		case "/big":
			io.WriteString(w, big)
			return
		}
		fmt.Fprintf(w, "%s %d", r.URL.Path, n)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
send_timeout = "500ms"
[admin]
listen = ""
[log]
level = "error"
[[upstream]]
name = "up"
targets = ["http://%s"]
[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, ln.Addr())
	return startServer(t, "halfclose.toml", src).Proxy.String()
}

// TestProxyHalfClosedPipelineWithBody: through the whole proxy face, a
// client that pipelines a POST with a body behind a slow GET, or sends a
// slow POST first, and then half-closes (printf … | nc -N). The front
// answers the bodiless requests before the POST; it hands the POST, and
// the rest of the connection, to net/http's server, whose background
// read takes the EOF for a departure and cancels the request: the proxy
// then answers it nothing, as any request of a client gone, and the
// connection ends. A known limit of net/http, named in operating.md
// (RFC 9112 asks clients not to pipeline after a non-idempotent method);
// pinned, so that a change shows.
func TestProxyHalfClosedPipelineWithBody(t *testing.T) {
	t.Parallel()
	addr := halfCloseServer(t)
	post := func(path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
	}
	for _, tc := range []struct {
		name, req string
		answered  []string // the answers before the hand-off
	}{
		{"get-then-post", "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n" + post("/slow") + "GET /three HTTP/1.1\r\nHost: a\r\n\r\n", []string{"/slow 0"}},
		{"post-first", post("/slow") + "GET /two HTTP/1.1\r\nHost: a\r\n\r\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tc.req)
			c.(*net.TCPConn).CloseWrite()
			br := bufio.NewReader(c)
			for i, want := range tc.answered {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d (%s): %v", i+1, want, err)
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || string(b) != want {
					t.Fatalf("answer %d: %d %q, want 200 %q", i+1, resp.StatusCode, b, want)
				}
			}
			if rest, err := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("after the front's answers: %q (%v); want the connection ended, the POST canceled by net/http unanswered (if net/http now answers it, update operating.md and this test)", rest, err)
			}
		})
	}
}

// TestProxyHalfClosedSlowReader: a client that pipelines two requests
// for 8 MB answers, half-closes and never reads is not served forever:
// the connection ends within send_timeout (500 ms here) of the writes
// stalling, so that what it reads afterwards is cut short and ends. (It
// is closed, not reset: the kernel keeps what was not sent, up to the
// socket's send buffer, several MB, and goes on offering it; nginx's
// reset_timedout_connection resets instead.)
func TestProxyHalfClosedSlowReader(t *testing.T) {
	t.Parallel()
	addr := halfCloseServer(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a\r\n\r\nGET /big HTTP/1.1\r\nHost: a\r\n\r\n")
	c.(*net.TCPConn).CloseWrite()
	time.Sleep(3 * time.Second) // never reading, six times send_timeout
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	n, err := io.Copy(io.Discard, c)
	t.Logf("read %d bytes in %v after not reading for 3 s: %v", n, time.Since(start), err)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the connection was still open 13 s after the writes stalled")
	}
	if n >= 2*(8<<20) {
		t.Errorf("read %d bytes after 3 s of not reading: both 8 MB answers were sent whole, the stalled writes outlived send_timeout", n)
	}
}
