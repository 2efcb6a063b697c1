package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerWatchAnsweredFirst: a handler that asks for a watch that is
// to start later and answers before then pays for nothing: the answer
// goes out at once and the connection serves its next request.
func TestServerWatchAnsweredFirst(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(interface{ WatchClient(time.Duration) }).WatchClient(time.Hour)
		io.WriteString(w, r.URL.Path)
	}), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for _, path := range []string{"/1", "/2"} {
		io.WriteString(c, get(path))
		if _, body := readResponse(t, c, br, "GET"); body != path {
			t.Errorf("got %q, want %q", body, path)
		}
	}
}

// TestServerWatchClientTwice: WatchClient is once per request: a second
// call (a handler that asks again, a middleware and the handler it
// wraps) does not start a second read in the background, and the
// request that comes meanwhile is served next.
func TestServerWatchClientTwice(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wc := w.(interface{ WatchClient(time.Duration) })
		wc.WatchClient(0)
		time.Sleep(50 * time.Millisecond)
		wc.WatchClient(0)
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		io.WriteString(w, r.URL.Path)
	}), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, get("/1"))
	time.Sleep(100 * time.Millisecond)
	io.WriteString(c, get("/2", "Connection: close"))
	for _, path := range []string{"/1", "/2"} {
		if _, body := readResponse(t, c, br, "GET"); body != path {
			t.Errorf("got %q, want %q", body, path)
		}
	}
	expectClosed(t, c, br, 5*time.Second)
}

// TestServerWatchedClientGoneGetsNothingMore: a watched client that
// sends part of a next head and leaves (the EOF of a half-close after
// it) is gone: its request's context is canceled, what the handler
// still writes goes out, and the connection ends there, the part-head
// unanswered.
func TestServerWatchedClientGoneGetsNothingMore(t *testing.T) {
	canceled := make(chan bool, 1)
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(interface{ WatchClient(time.Duration) }).WatchClient(0)
		select {
		case <-r.Context().Done():
			canceled <- true
		case <-time.After(5 * time.Second):
			canceled <- false
		}
		io.WriteString(w, "late")
	}), nil)
	c := dial(t, addr)
	io.WriteString(c, get("/"))
	time.Sleep(50 * time.Millisecond)
	io.WriteString(c, "G")
	c.(*net.TCPConn).CloseWrite()
	if !<-canceled {
		t.Error("the request's context was not canceled")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	if !strings.HasSuffix(string(b), "\r\n\r\nlate") {
		t.Errorf("got %q, want the answer and nothing after it", b)
	}
}

// TestServerHandOffKeepsEveryByte: a connection handed to net/http
// gives it every byte the front had read, however net/http's reads cut
// them (its first read takes 4096).
func TestServerHandOffKeepsEveryByte(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), nil)
	for _, total := range []int{4095, 4096, 4097, 4098, 8000} {
		head := "POST /h HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: "
		n := total - len(head) - len("\r\n\r\n")
		n -= len(fmt.Sprint(n))
		body := strings.Repeat("b", n)
		req := fmt.Sprintf("%s%d\r\n\r\n%s", head, n, body)
		if len(req) != total {
			t.Fatalf("request of %d bytes, want %d", len(req), total)
		}
		c := dial(t, addr)
		io.WriteString(c, req)
		if _, got := readResponse(t, c, bufio.NewReader(c), "POST"); got != fmt.Sprintf("net/http POST /h %q", body) {
			t.Errorf("%d bytes: got %.80q…", total, got)
		}
	}
}

// TestServerHandOffClearsWriteDeadline: the write deadline a handler of
// the front set for its answer does not reach the handler of a request
// handed to net/http later on the connection.
func TestServerHandOffClearsWriteDeadline(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			io.WriteString(w, "front")
			return
		}
		io.ReadAll(r.Body)
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, served(w))
	}), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, get("/"))
	if _, body := readResponse(t, c, br, "GET"); body != "front" {
		t.Errorf("got %q", body)
	}
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
	if _, body := readResponse(t, c, br, "POST"); body != "net/http" {
		t.Errorf("got %q from the handed-off request", body)
	}
}

// TestServerWriteWholeTaken: on a connection the front serves, a
// handler's WriteWhole writes the answer (the connection's buffer holds
// it) as WriteHeader and Write would.
func TestServerWriteWholeTaken(t *testing.T) {
	taken := make(chan bool, 2)
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Length"] = []string{"5"}
		h["Content-Type"] = []string{"text/plain"}
		var fields [10]string
		fields[0] = "Content-Length: 5\r\nContent-Type: text/plain\r\n"
		ok := w.(interface {
			WriteWhole(int, [10]string, []byte) bool
		}).WriteWhole(http.StatusTooManyRequests, fields, []byte("whole"))
		taken <- ok
		if !ok {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "whole")
		}
	}), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for range 2 {
		io.WriteString(c, get("/"))
		resp, body := readResponse(t, c, br, "GET")
		if resp.StatusCode != http.StatusTooManyRequests || body != "whole" {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
		if !<-taken {
			t.Error("WriteWhole declined an answer that fits")
		}
	}
}

// TestServerHandOffLeavesNoReadDeadline: a connection handed to
// net/http carries no read deadline of the front's wait for its first
// bytes (shedAfter's, a second from the accept): with HTTP/2 prior
// knowledge on, net/http peeks for the preface before it sets any
// deadline of its own, and a head shorter than the preface's first line
// leaves it waiting for more, without a deadline, as it does when it
// accepted the connection itself; not answered 400 when the front's
// deadline passes.
func TestServerHandOffLeavesNoReadDeadline(t *testing.T) {
	if shedAfter != time.Second {
		t.Skip("the deadline left would be -h1.shed's")
	}
	config := func(srv *http.Server) {
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		protocols.SetUnencryptedHTTP2(true)
		srv.Protocols = &protocols
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") })
	for _, which := range []string{"net/http", "front"} {
		t.Run(which, func(t *testing.T) {
			t.Parallel()
			var addr string
			if which == "front" {
				_, _, addr = startFront(t, h, config)
			} else {
				_, addr = startPlain(t, h, config)
			}
			c := dial(t, addr)
			io.WriteString(c, "x\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(2 * shedAfter))
			b, err := io.ReadAll(c)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || len(b) > 0 {
				t.Errorf("got %q and %v within %v, want nothing (the server waiting for more)", b, err, 2*shedAfter)
			}
		})
	}
}

// TestServerWatchNoticesGoneUntilBufferFull: the watch goes on reading
// what a client pipelines while its request waits, so that a client
// that then leaves is noticed (the request's context canceled), until
// the read buffer is full: here all but its last byte is filled with a
// next head cut short, and the client's departure is still noticed.
func TestServerWatchNoticesGoneUntilBufferFull(t *testing.T) {
	entered := make(chan struct{})
	canceled := make(chan bool, 1)
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(interface{ WatchClient(time.Duration) }).WatchClient(0)
		close(entered)
		select {
		case <-r.Context().Done():
			canceled <- true
		case <-time.After(10 * time.Second):
			canceled <- false
		}
	}), nil)
	c := dial(t, addr)
	io.WriteString(c, get("/slow"))
	waitEntered(t, entered)
	next := "GET /next HTTP/1.1\r\nX-Pad: "
	next += strings.Repeat("p", readBuffer-1-len(next))
	io.WriteString(c, next)
	c.Close()
	if !<-canceled {
		t.Errorf("the client left after pipelining %d bytes (the buffer but one): its request's context not canceled", len(next))
	}
}

// TestServerWatchedRequestsInARow: on a connection whose requests are
// watched one after the other, what each watch read of the next request
// is served once, in order; and after a watched request the connection
// waits for its next one for the whole idle timeout (the watch's ending
// left no read deadline behind).
func TestServerWatchedRequestsInARow(t *testing.T) {
	t.Run("pipelined-during-each-watch", func(t *testing.T) {
		t.Parallel()
		entered := make(chan string, 3)
		_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.(interface{ WatchClient(time.Duration) }).WatchClient(0)
			entered <- r.URL.Path
			time.Sleep(100 * time.Millisecond) // the watch reads the next request meanwhile
			io.WriteString(w, r.URL.Path)
		}), nil)
		c := dial(t, addr)
		br := bufio.NewReader(c)
		io.WriteString(c, get("/a"))
		<-entered
		io.WriteString(c, get("/b"))
		<-entered
		io.WriteString(c, get("/c", "Connection: close"))
		for _, want := range []string{"/a", "/b", "/c"} {
			if _, body := readResponse(t, c, br, "GET"); body != want {
				t.Fatalf("answered %q, want %q", body, want)
			}
		}
		expectClosed(t, c, br, 10*time.Second)
	})
	t.Run("idle-timeout-after-watch", func(t *testing.T) {
		t.Parallel()
		if shedAfter != time.Second {
			t.Skip("an idle timeout within -h1.shed's is another path")
		}
		_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/watched" {
				w.(interface{ WatchClient(time.Duration) }).WatchClient(0)
				time.Sleep(20 * time.Millisecond) // the watch's read has started
			}
			io.WriteString(w, r.URL.Path)
		}), func(srv *http.Server) { srv.IdleTimeout = shedAfter })
		c := dial(t, addr)
		br := bufio.NewReader(c)
		io.WriteString(c, get("/watched"))
		if _, body := readResponse(t, c, br, "GET"); body != "/watched" {
			t.Fatalf("answered %q", body)
		}
		time.Sleep(shedAfter / 4)
		io.WriteString(c, get("/next", "Connection: close"))
		if _, body := readResponse(t, c, br, "GET"); body != "/next" {
			t.Fatalf("answered %q, want /next", body)
		}
	})
}
