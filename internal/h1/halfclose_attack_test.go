package h1

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

// bodyHalfCloseHandler reads each request's body, then is
// halfCloseHandler; it answers the path and the body's length.
func bodyHalfCloseHandler(canceled chan<- string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if wc, ok := w.(interface{ WatchClient(time.Duration) }); ok {
			wc.WatchClient(0)
		}
		wait := 50 * time.Millisecond // an upstream's time
		if strings.HasPrefix(r.URL.Path, "/p") {
			wait = 0 // the long pipeline's
		}
		if r.URL.Path == "/slow" {
			wait = 300 * time.Millisecond
		}
		select {
		case <-r.Context().Done():
			canceled <- r.URL.Path
			return
		case <-time.After(wait):
		}
		fmt.Fprintf(w, "%s %d", r.URL.Path, n)
	})
}

// TestServerHalfClosedPipelineShapes: half-closed pipelines of other
// shapes than three GETs. A pipeline longer than the read buffer is
// answered whole and in order on the front, none canceled. A request
// with a body (one holding a blank line), first or pipelined, or in
// HTTP/1.0, is handed to net/http's server with the rest of the
// connection, and net/http's background read takes the half-close for a
// departure: it still answers each request, in order, but their contexts
// are canceled (so a handler that gives up answers empty, and the proxy
// answers nothing: operating.md names this). Pinned both ways, so that a
// change of either shows.
func TestServerHalfClosedPipelineShapes(t *testing.T) {
	body := "a\r\n\r\nb\n\nc"
	post := func(path string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	}
	var long strings.Builder
	var longWant []string
	long.WriteString("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	longWant = append(longWant, "/slow 0")
	for i := 0; long.Len() < 3*readBuffer; i++ {
		fmt.Fprintf(&long, "GET /p%d HTTP/1.1\r\nHost: a\r\nX-Pad: %s\r\n\r\n", i, strings.Repeat("x", 64))
		longWant = append(longWant, fmt.Sprintf("/p%d 0", i))
	}
	for _, tc := range []struct {
		name, req string
		want      []string
		handedOff bool // served by net/http, which cancels on the half-close
	}{
		{"post-first", post("/slow") + "GET /two HTTP/1.1\r\nHost: a\r\n\r\n", []string{"/slow 9", "/two 0"}, true},
		{"post-pipelined", "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n" + post("/two") + post("/three"), []string{"/slow 0", "/two 9", "/three 9"}, true},
		{"past-the-buffer", long.String(), longWant, false},
		{"http1.0-keepalive", "GET /slow HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /two HTTP/1.0\r\n\r\n", []string{"/slow 0", "/two 0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canceled := make(chan string, len(tc.want))
			_, _, addr := startFront(t, bodyHalfCloseHandler(canceled), nil)
			c := dial(t, addr)
			br := bufio.NewReader(c)
			done := make(chan error, 1)
			go func() {
				_, err := io.WriteString(c, tc.req)
				if err == nil {
					err = c.(*net.TCPConn).CloseWrite()
				}
				done <- err
			}()
			empty := 0
			for _, want := range tc.want {
				resp, got := readResponse(t, c, br, "POST") // no HEAD among them
				if tc.handedOff && got == "" {
					empty++ // canceled by net/http, answered empty
					got = want
				}
				if resp.StatusCode != http.StatusOK || got != want {
					t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, got, want)
				}
			}
			if tc.handedOff {
				if empty == 0 {
					t.Errorf("net/http answered every request whole: its half-close handling changed (update operating.md and this test)")
				}
				return
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("after the answers: %q, %v; want the connection closed", rest, err)
			}
			select {
			case p := <-canceled:
				t.Errorf("%s was canceled", p)
			default:
			}
		})
	}
}
