package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// servedBy says whose response writer w is: the front's (*response) or
// net/http's. The comparison tests record it (servedLog) to hold that a
// case meant for the front was served by the front: were it handed to
// net/http, the two sides would be net/http both, and agree.
func servedBy(w http.ResponseWriter) string {
	if _, ok := w.(*response); ok {
		return "front"
	}
	return "net/http"
}

// servedLog records, per request path, whose writers served it.
type servedLog struct {
	mu sync.Mutex
	by map[string]map[string]int
}

// wrap returns h recording each request in l first.
func (l *servedLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		if l.by == nil {
			l.by = map[string]map[string]int{}
		}
		if l.by[r.URL.Path] == nil {
			l.by[r.URL.Path] = map[string]int{}
		}
		l.by[r.URL.Path][servedBy(w)]++
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// servers returns whose writers served path so far, sorted and
// joined by "+": "front", "net/http", "front+net/http", or "" (none).
func (l *servedLog) servers(path string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, who := range []string{"front", "net/http"} {
		if l.by[path][who] > 0 {
			s = append(s, who)
		}
	}
	return strings.Join(s, "+")
}

// requireCloseHonoured fails the test at once unless the server at addr
// answers a GET of path with Connection: close and then closes the
// connection, each within 5 s. The comparison tests call it first: each
// of their cases ends with such a request and reads until the
// connection closes, waiting silence (2 s) per read to find it left
// open; a server that ignores the request's close would have them run
// for minutes (TestResponseRandomScripts: over an hour) before they
// fail.
func requireCloseHonoured(t *testing.T, addr, path string) {
	t.Helper()
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, get(path, "Connection: close"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("GET %s with Connection: close: %v", path, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("GET %s with Connection: close: the body: %v", path, err)
	}
	if !resp.Close {
		t.Fatalf("GET %s with Connection: close: answered without Connection: close (%q)", path, resp.Header["Connection"])
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("GET %s with Connection: close: the connection still open 5 s after the answer", path)
	}
	if len(b) > 0 {
		t.Fatalf("GET %s with Connection: close: %q after the answer", path, b)
	}
}

// TestServerRequestCloseEndsConnection: a request with Connection: close
// (alone or among other tokens) is answered with Connection: close, and
// the front closes the connection after it, at once, as net/http does.
// Within 5 s, or the test fails (it does not wait for the test's
// timeout).
func TestServerRequestCloseEndsConnection(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s close=%v", servedBy(w), r.Close)
	})
	_, _, addr := startFront(t, h, nil)
	for _, field := range []string{"Connection: close", "Connection: keep-alive, Close"} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			c := dial(t, addr)
			br := bufio.NewReader(c)
			// A first request keeps the connection; the second closes it.
			io.WriteString(c, get("/first"))
			if _, body := readResponse(t, c, br, "GET"); body != "front close=false" {
				t.Fatalf("first request: %q", body)
			}
			io.WriteString(c, get("/second", field))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
			if err != nil {
				t.Fatalf("second request: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("second request's body: %v", err)
			}
			if string(body) != "front close=true" {
				t.Errorf("second request: %q, want the front's, with Request.Close", body)
			}
			if !resp.Close {
				t.Errorf("answer without Connection: close (%q)", resp.Header["Connection"])
			}
			start := time.Now()
			c.SetReadDeadline(start.Add(5 * time.Second))
			rest, err := io.ReadAll(br)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open %v after the answer to a request with %s", time.Since(start).Round(time.Millisecond), field)
			}
			if len(rest) > 0 {
				t.Errorf("%q after the answer", rest)
			}
		})
	}
}

// TestServerIdleDeadlineEighth: the idle deadline is moved lazily, only
// when it is off by more than an eighth of idle_timeout (setReadDeadline),
// so that an idle connection is closed between 7/8 of idle_timeout and
// idle_timeout after its last request, never sooner. The second request
// comes 3/8 of idle_timeout after the first, so the deadline set after
// the first (3/8 short) must move; with a looser rule (moved only when
// off by half) it would stay, and the connection close 5/8 of
// idle_timeout after the second request. The lower bound is measured
// from the second request's sending, which is before the server can set
// its deadline: exact. The upper bound is generous (a shared machine).
func TestServerIdleDeadlineEighth(t *testing.T) {
	const idle = 800 * time.Millisecond
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", servedBy(w), r.URL.Path)
	}), func(srv *http.Server) {
		srv.ReadHeaderTimeout = 5 * time.Second
		srv.IdleTimeout = idle
	})
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, get("/one"))
	if _, body := readResponse(t, c, br, "GET"); body != "front /one" {
		t.Fatalf("first request: %q", body)
	}
	time.Sleep(3 * idle / 8)
	sent := time.Now()
	io.WriteString(c, get("/two"))
	if _, body := readResponse(t, c, br, "GET"); body != "front /two" {
		t.Fatalf("second request: %q", body)
	}
	answered := time.Now()
	c.SetReadDeadline(answered.Add(idle + 3*time.Second))
	b, err := io.ReadAll(br)
	closed := time.Now()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open %v after the last answer (idle_timeout %v)", closed.Sub(answered).Round(time.Millisecond), idle)
	}
	if len(b) > 0 {
		t.Errorf("%q before the connection closed, want nothing", b)
	}
	if d := closed.Sub(sent); d < idle*7/8 {
		t.Errorf("idle connection closed %v after the last request was sent, sooner than 7/8 of idle_timeout (%v)", d.Round(time.Millisecond), idle*7/8)
	}
	if d := closed.Sub(answered); d > idle+time.Second {
		t.Errorf("idle connection closed %v after the last answer, idle_timeout %v", d.Round(time.Millisecond), idle)
	}
}
