package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// served says which server answered: the front's response writer has
// WatchClient, net/http's has not.
func served(w http.ResponseWriter) string {
	if _, ok := w.(interface{ WatchClient(time.Duration) }); ok {
		return "front"
	}
	return "net/http"
}

// echo answers with who served the request, its method, path and body.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s %s %q", served(w), r.Method, r.URL.Path, b)
}

// dial connects to addr, closed at the test's end.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readResponse reads one response (its body whole) from br, waiting at
// most 10 s.
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response body: %v", err)
	}
	return resp, string(b)
}

// expectClosed waits (at most within) for the server to close c, with
// nothing more sent, and returns how long it took.
func expectClosed(t *testing.T, c net.Conn, br io.Reader, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(within))
	b, err := io.ReadAll(br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", within)
	}
	if len(b) > 0 {
		t.Errorf("got %q before the connection closed, want nothing", b)
	}
	return time.Since(start)
}

func TestServerBodyHandedOff(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), nil)
	for _, tc := range []struct{ name, req, want string }{
		{"content-length", "POST /cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", `net/http POST /cl "hello"`},
		{"chunked", "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", `net/http POST /te "hello"`},
		{"no-body", "GET /get HTTP/1.1\r\nHost: a\r\n\r\n", `front GET /get ""`},
		{"length-zero", "POST /zero HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", `front POST /zero ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			br := bufio.NewReader(c)
			io.WriteString(c, tc.req)
			resp, body := readResponse(t, c, br, "POST")
			if resp.StatusCode != http.StatusOK || body != tc.want {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, tc.want)
			}
			// The connection serves another request after it.
			io.WriteString(c, "GET /again HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
			resp, body = readResponse(t, c, br, "GET")
			if resp.StatusCode != http.StatusOK || !strings.HasSuffix(body, ` GET /again ""`) {
				t.Errorf("second request: got %d %q", resp.StatusCode, body)
			}
			expectClosed(t, c, br, 10*time.Second)
		})
	}
}

func TestServerPipelinedFrontThenHandOff(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: a\r\n\r\n"+
		"GET /two HTTP/1.1\r\nHost: a\r\n\r\n"+
		"POST /three HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"+
		"GET /four HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	for _, want := range []string{
		`front GET /one ""`,
		`front GET /two ""`,
		`net/http POST /three "hello"`,
		`net/http GET /four ""`,
	} {
		resp, body := readResponse(t, c, br, "GET")
		if resp.StatusCode != http.StatusOK || body != want {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
	expectClosed(t, c, br, 10*time.Second)
}

func TestServerPipelinedPartialSecondHead(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	// The second head is cut: the front serves the first, and the
	// second itself once the rest of it comes (within
	// read_header_timeout, not handed to net/http).
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHo")
	resp, body := readResponse(t, c, br, "GET")
	if resp.StatusCode != http.StatusOK || body != `front GET /one ""` {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
	time.Sleep(50 * time.Millisecond)
	io.WriteString(c, "st: a\r\nConnection: close\r\n\r\n")
	resp, body = readResponse(t, c, br, "GET")
	if resp.StatusCode != http.StatusOK || body != `front GET /two ""` {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
	expectClosed(t, c, br, 10*time.Second)
}

func TestServerSplitHead(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /split HTTP/1.1\r\nHo")
	time.Sleep(100 * time.Millisecond)
	io.WriteString(c, "st: a\r\nConnection: close\r\n\r\n")
	resp, body := readResponse(t, c, br, "GET")
	if resp.StatusCode != http.StatusOK || body != `front GET /split ""` {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
	expectClosed(t, c, br, 10*time.Second)
}

func TestServerMalformedHandedOff(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), nil)
	for _, tc := range []struct {
		req  string
		code int
	}{
		{"GET / HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", http.StatusBadRequest},
		{"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", http.StatusBadRequest},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusNotImplemented},
		{"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("x", 2<<20) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
	} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		go io.WriteString(c, tc.req) // the server may stop reading early
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%.60q: %v", tc.req, err)
			continue
		}
		if resp.StatusCode != tc.code {
			t.Errorf("%.60q: got %d, want %d", tc.req, resp.StatusCode, tc.code)
		}
	}
}

func TestServerH2CPriorKnowledge(t *testing.T) {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", served(w), r.Proto)
	}), func(srv *http.Server) { srv.Protocols = &protocols })

	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for range 2 { // two requests on the one HTTP/2 connection
		resp, err := client.Get("http://" + addr + "/h2c")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 2 || string(b) != "net/http HTTP/2.0" {
			t.Errorf("got %s %q, want HTTP/2.0 %q", resp.Proto, b, "net/http HTTP/2.0")
		}
	}

	// HTTP/1.1 on the same listener is still the front's.
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	_, body := readResponse(t, c, br, "GET")
	if body != "front HTTP/1.1" {
		t.Errorf("HTTP/1.1: got %q", body)
	}
}

func TestServerWatchClient(t *testing.T) {
	type result struct {
		err     error
		watched bool
	}
	results := make(chan result, 1)
	entered := make(chan struct{}, 1)
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A request that comes while the previous one is watched may
		// be handed to net/http (the watch keeps what it read, and the
		// front hands off a head it does not hold whole), which watches
		// every request itself.
		wc, ok := w.(interface{ WatchClient(time.Duration) })
		watch := r.URL.Path != "/nowatch" && ok
		if watch {
			wc.WatchClient(0)
		}
		entered <- struct{}{}
		if r.URL.Path == "/watch" {
			// Wait for the client to go away.
			select {
			case <-r.Context().Done():
				results <- result{err: r.Context().Err(), watched: watch}
			case <-time.After(10 * time.Second):
				results <- result{watched: watch}
			}
			return
		}
		// Wait a little, then answer: a client that stays gets its
		// answer, watched or not.
		select {
		case <-r.Context().Done():
			results <- result{err: r.Context().Err(), watched: watch}
			return
		case <-time.After(300 * time.Millisecond):
		}
		results <- result{watched: watch}
		fmt.Fprintf(w, "done %s", r.URL.Path)
	}), nil)

	// The client leaves: at once; after a byte of a next request (which
	// the watch keeps, and must watch on after); with a head that fills
	// the read buffer exactly (the watch must still have room).
	const plain = "GET /watch HTTP/1.1\r\nHost: a\r\n\r\n"
	pad := "GET /watch HTTP/1.1\r\nHost: a\r\nX-Pad: "
	full := pad + strings.Repeat("p", readBuffer-len(pad)-4) + "\r\n\r\n"
	for _, leave := range []struct{ name, head, then string }{
		{"client-goes-away", plain, ""},
		{"client-sends-a-byte-and-goes-away", plain, "G"},
		{"client-with-a-full-buffer-goes-away", full, ""},
	} {
		t.Run(leave.name, func(t *testing.T) {
			c := dial(t, addr)
			io.WriteString(c, leave.head)
			waitEntered(t, entered)
			if leave.then != "" {
				io.WriteString(c, leave.then)
				time.Sleep(100 * time.Millisecond)
			}
			start := time.Now()
			c.Close()
			select {
			case res := <-results:
				if !res.watched {
					t.Error("the request was not the front's, or not watched")
				}
				if !errors.Is(res.err, context.Canceled) {
					t.Errorf("handler's context: %v, want context.Canceled within 10 s of the client closing", res.err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("canceled %v after the client closed", d)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("handler did not return")
			}
		})
	}

	for _, path := range []string{"/nowatch", "/watch-stay"} {
		t.Run("client-stays"+path, func(t *testing.T) {
			c := dial(t, addr)
			br := bufio.NewReader(c)
			io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
			waitEntered(t, entered)
			// A pipelined request arrives while the handler waits: it
			// must be served next, not lost to the watch.
			time.Sleep(50 * time.Millisecond)
			io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
			for i := range 2 {
				select {
				case res := <-results:
					if res.err != nil {
						t.Errorf("request %d: handler's context: %v", i, res.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("request %d: handler did not return", i)
				}
				if i == 0 {
					waitEntered(t, entered)
				}
				resp, body := readResponse(t, c, br, "GET")
				if resp.StatusCode != http.StatusOK || body != "done "+path {
					t.Errorf("request %d: got %d %q", i, resp.StatusCode, body)
				}
			}
			expectClosed(t, c, br, 10*time.Second)
		})
	}

	t.Run("nowatch-client-goes-away", func(t *testing.T) {
		// Not watched: the handler is not told, and finishes normally.
		c := dial(t, addr)
		io.WriteString(c, "GET /nowatch HTTP/1.1\r\nHost: a\r\n\r\n")
		waitEntered(t, entered)
		c.Close()
		select {
		case res := <-results:
			if res.err != nil {
				t.Errorf("handler's context: %v, want not canceled (not watched)", res.err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("handler did not return")
		}
	})
}

func waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
}

func TestServerShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan string, 2)
	front, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			b, _ := io.ReadAll(r.Body)
			entered <- served(w)
			<-release
			fmt.Fprintf(w, "%s %s %s %q", served(w), r.Method, r.URL.Path, b)
			return
		}
		echo(w, r)
	}), nil)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	// An idle keep-alive connection of the front's, and one of net/http's.
	idle := dial(t, addr)
	idleBr := bufio.NewReader(idle)
	io.WriteString(idle, "GET /idle HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, body := readResponse(t, idle, idleBr, "GET"); body != `front GET /idle ""` {
		t.Fatalf("idle: got %q", body)
	}
	idleH := dial(t, addr)
	idleHBr := bufio.NewReader(idleH)
	io.WriteString(idleH, "POST /idle HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
	if _, body := readResponse(t, idleH, idleHBr, "POST"); body != `net/http POST /idle "x"` {
		t.Fatalf("idle handed off: got %q", body)
	}

	// Requests in flight, the front's and net/http's.
	busy := dial(t, addr)
	busyBr := bufio.NewReader(busy)
	io.WriteString(busy, "GET /block HTTP/1.1\r\nHost: a\r\n\r\n")
	busyH := dial(t, addr)
	busyHBr := bufio.NewReader(busyH)
	io.WriteString(busyH, "POST /block HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\ny")
	got := map[string]bool{}
	for range 2 {
		select {
		case s := <-entered:
			got[s] = true
		case <-time.After(10 * time.Second):
			t.Fatal("handlers not called")
		}
	}
	if !got["front"] || !got["net/http"] {
		t.Fatalf("handlers in flight: %v, want the front's and net/http's", got)
	}

	done := make(chan error, 1)
	go func() { done <- front.Shutdown(context.Background()) }()
	expectClosed(t, idle, idleBr, 10*time.Second)
	expectClosed(t, idleH, idleHBr, 10*time.Second)
	waitListenerClosed(t, addr)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with requests in flight", err)
	default:
	}

	once.Do(func() { close(release) })
	for _, tc := range []struct {
		c      net.Conn
		br     *bufio.Reader
		method string
		want   string
	}{
		{busy, busyBr, "GET", `front GET /block ""`},
		{busyH, busyHBr, "POST", `net/http POST /block "y"`},
	} {
		resp, body := readResponse(t, tc.c, tc.br, tc.method)
		if body != tc.want {
			t.Errorf("in flight: got %q, want %q", body, tc.want)
		}
		if !resp.Close { // ReadResponse deletes the field it read as close
			t.Errorf("in flight %s: Connection %q, want close", tc.want, resp.Header["Connection"])
		}
		expectClosed(t, tc.c, tc.br, 10*time.Second)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

func TestServerShutdownTimeout(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	front, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		entered <- struct{}{}
		<-release
		echo(w, r)
	}), nil)
	t.Cleanup(func() { close(release) })

	busy := dial(t, addr)
	io.WriteString(busy, "GET /block HTTP/1.1\r\nHost: a\r\n\r\n")
	busyH := dial(t, addr)
	io.WriteString(busyH, "POST /block HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\ny")
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("handlers not called")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := front.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown returned %v after its context expired", d)
	}
	// The handlers still block; Close ends their connections.
	if err := front.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	expectClosed(t, busy, busy, 10*time.Second)
	expectClosed(t, busyH, busyH, 10*time.Second)
}

func TestServerConnContext(t *testing.T) {
	type ctxKey struct{}
	var mu sync.Mutex
	var seen []net.Conn
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(ctxKey{}).(net.Conn)
		tc, ok := c.(*net.TCPConn)
		if !ok {
			fmt.Fprintf(w, "%s: ConnContext saw %T", served(w), c)
			return
		}
		if tc.RemoteAddr().String() != r.RemoteAddr {
			fmt.Fprintf(w, "%s: ConnContext saw remote %v, request has %v", served(w), tc.RemoteAddr(), r.RemoteAddr)
			return
		}
		if la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr); la == nil || la.String() != tc.LocalAddr().String() {
			fmt.Fprintf(w, "%s: LocalAddrContextKey %v, conn's %v", served(w), la, tc.LocalAddr())
			return
		}
		if s, _ := r.Context().Value(http.ServerContextKey).(*http.Server); s == nil {
			fmt.Fprintf(w, "%s: no ServerContextKey", served(w))
			return
		}
		fmt.Fprintf(w, "%s: %s", served(w), r.RemoteAddr)
	}), func(srv *http.Server) {
		srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			mu.Lock()
			seen = append(seen, c)
			mu.Unlock()
			return context.WithValue(ctx, ctxKey{}, c)
		}
	})
	for _, tc := range []struct{ req, who string }{
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "front"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", "net/http"},
	} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		io.WriteString(c, tc.req)
		_, body := readResponse(t, c, br, "GET")
		if want := tc.who + ": " + c.LocalAddr().String(); body != want {
			t.Errorf("got %q, want %q", body, want)
		}
		expectClosed(t, c, br, 10*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range seen {
		if _, ok := c.(*net.TCPConn); !ok {
			t.Errorf("ConnContext called with a %T, want the accepted *net.TCPConn", c)
		}
	}
}

// timeoutTranscript sends what each of sends holds (then waits that
// long) to addr and returns what the server sent until it closed the
// connection (or 10 s passed), and how long after the last send.
func timeoutTranscript(t *testing.T, addr string, sends []string, pause time.Duration) (string, time.Duration) {
	t.Helper()
	c := dial(t, addr)
	rec := &recorder{c: c}
	for i, s := range sends {
		if i > 0 {
			time.Sleep(pause)
		}
		io.WriteString(c, s)
	}
	start := time.Now()
	c.SetReadDeadline(start.Add(10 * time.Second))
	var b [4096]byte
	for {
		n, err := c.Read(b[:])
		rec.buf = append(rec.buf, b[:n]...)
		if err != nil {
			rec.err = err
			break
		}
	}
	return rec.transcript(), time.Since(start)
}

// TestServerTimeouts: ReadHeaderTimeout and IdleTimeout close a
// connection that sends nothing, or not enough, as net/http does.
func TestServerTimeouts(t *testing.T) {
	config := func(srv *http.Server) {
		srv.ReadHeaderTimeout = 200 * time.Millisecond
		srv.IdleTimeout = 300 * time.Millisecond
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q", r.Method, r.URL.Path, b)
	})
	_, plain := startPlain(t, h, config)
	_, _, front := startFront(t, h, config)
	for _, tc := range []struct {
		name  string
		sends []string
	}{
		{"silent", nil},
		// Found in review (partial head timed out), now fixed: a head cut short inside a line
		// ("Ho", no colon yet), then silence past ReadHeaderTimeout.
		// net/http's bufio.Reader.ReadLine hands back the partial line
		// without the timeout error, the line fails to parse, and
		// net/http answers "400 Bad Request" (Connection: close); the
		// front (which now waits for the rest of a head itself) closes
		// without an answer.
		{"partial-head", []string{"GET / HTTP/1.1\r\nHo"}},
		// Cut after a colon: net/http's partial line parses, the next
		// read fails, and it closes unanswered, as the front does.
		{"partial-head-after-colon", []string{"GET / HTTP/1.1\r\nHost: a"}},
		{"partial-head-in-two", []string{"GET / HTTP/1.1\r\n", "Host: a\r\n"}},
		// Partial heads net/http reads as it reads a whole one: its line
		// reader hands back a last line cut short, or a line with the CR
		// of a cut CRLF, and a line that does not parse (or one before
		// it) is a bad request.
		{"partial-head-cut-in-crlf", []string{"GET / HTTP/1.1\r\nHost: a\r"}},
		{"partial-head-obs-fold", []string{"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b"}},
		{"partial-head-bad-method", []string{"G(T / HTTP/1.1"}},
		{"partial-head-bad-target", []string{"GET /%zz HTTP/1.1"}},
		{"partial-head-bad-version", []string{"GET / HTTP/1.x"}},
		{"partial-head-no-target", []string{"GET"}},
		{"partial-head-after-bad-line", []string{"GET / HTTP/1.1\r\nBad Line\r\nHo"}},
		{"partial-head-space-before-name", []string{"GET / HTTP/1.1\r\n Host: a"}},
		{"partial-head-bad-name", []string{"GET / HTTP/1.1\r\nX Y: a"}},
		{"idle-after-front-request", []string{"GET /front HTTP/1.1\r\nHost: a\r\n\r\n"}},
		{"idle-after-handed-request", []string{"POST /handed HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"}},
		// Found in review (partial head timed out), now fixed, as partial-head, with the
		// request line cut ("GET / HT") after a request the front
		// served: net/http answers 400 after ReadHeaderTimeout; the
		// front closes without an answer.
		{"partial-after-front-request", []string{"GET /front HTTP/1.1\r\nHost: a\r\n\r\n", "GET / HT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, _ := timeoutTranscript(t, plain, tc.sends, 50*time.Millisecond)
			got, d := timeoutTranscript(t, front, tc.sends, 50*time.Millisecond)
			if got != want {
				t.Errorf("%s", describeDiff(want, got))
			}
			if !strings.HasSuffix(got, "<connection closed>") {
				t.Errorf("front left the connection open")
			} else if d < 100*time.Millisecond {
				t.Errorf("front closed the connection after %v, before its timeout", d)
			}
		})
	}
}

func TestServerHandlerPanicLogged(t *testing.T) {
	var logged quietLog
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "partial")
		panic("boom-h1-test")
	}), func(srv *http.Server) { srv.ErrorLog = log.New(&logged, "", 0) })

	c := dial(t, addr)
	io.WriteString(c, "GET /panic HTTP/1.1\r\nHost: a\r\n\r\n")
	expectClosed(t, c, c, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logged.String(), "boom-h1-test") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := logged.String(); !strings.Contains(s, "panic serving") || !strings.Contains(s, "boom-h1-test") {
		t.Errorf("ErrorLog: %q, want the panic logged", s)
	}
	// With the goroutine's stack, and only that (not the rest of the
	// buffer it was read into).
	if s := logged.String(); !strings.Contains(s, "goroutine ") || strings.Contains(s, "\x00") {
		t.Errorf("ErrorLog: %q, want the stack, without NUL bytes", s)
	}

	before := logged.String()
	c = dial(t, addr)
	io.WriteString(c, "GET /abort HTTP/1.1\r\nHost: a\r\n\r\n")
	expectClosed(t, c, c, 10*time.Second)
	time.Sleep(50 * time.Millisecond)
	if s := logged.String(); s != before {
		t.Errorf("ErrAbortHandler logged: %q", strings.TrimPrefix(s, before))
	}
}

// TestServerHandedOffHalfClose: when net/http hangs up on a request
// whose body it will not read (here: more than its 256 KiB a handler
// leaves unread), it half-closes the connection (CloseWrite, a FIN at
// once), waits 500 ms for the client to read, then closes it. The
// client sees the end of the response at once.
//
// Found in review, now fixed: net/http half-closes only a connection that has a CloseWrite
// method (its closeWriter interface); the front hands it a *handedConn,
// which embeds net.Conn and so has none: no FIN is sent, and the client
// sees the connection end only after rstAvoidanceDelay (500 ms), when
// net/http closes it (with unread bytes: a RST, which may cost the
// client the response). The same goes for its 431 answer to a head too
// large.
func TestServerHandedOffHalfClose(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "not reading your body")
	})
	_, plain := startPlain(t, h, nil)
	_, _, front := startFront(t, h, nil)
	const size = 1 << 20
	req := fmt.Sprintf("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size)
	measure := func(addr string) time.Duration {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		go func() {
			io.WriteString(c, req)
			c.Write(make([]byte, size)) // fails once the server closes
		}()
		resp, _ := readResponse(t, c, br, "POST")
		if !resp.Close {
			t.Errorf("%s: response without Connection: close", addr)
		}
		start := time.Now()
		c.SetReadDeadline(start.Add(10 * time.Second))
		io.Copy(io.Discard, br) // EOF, or a RST
		return time.Since(start)
	}
	want := measure(plain)
	got := measure(front)
	if got > want+400*time.Millisecond {
		t.Errorf("handed-off connection ended %v after the response; net/http's own after %v (it half-closes at once)", got, want)
	}
}

var defaultMuxOnce sync.Once

// TestServerConfigDifferential compares, over raw connections, what the
// front and a plain net/http server send under the same server
// settings.
func TestServerConfigDifferential(t *testing.T) {
	defaultMuxOnce.Do(func() {
		http.HandleFunc("/h1-test-default-mux", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "from DefaultServeMux")
		})
	})
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	})
	// Heads of exactly MaxHeaderBytes (the second pipelined after the
	// first) are the front's.
	exactA, exactB := get("/exact-a", "Connection: keep-alive"), get("/exact-b", "Connection: close")
	bigField := "X-Big: " + strings.Repeat("b", 1000)
	hugeField := "X-Big: " + strings.Repeat("b", 6000)
	for _, tc := range []struct {
		name    string
		handler http.Handler
		config  func(*http.Server)
		reqs    []string
		// served says whose writers served each request on the front's
		// side, "path: who" (servedLog.servers), ", "-joined; none for a
		// nil handler.
		served string
	}{
		// Keep-alives disabled: net/http answers every request with
		// Connection: close and closes. The front cannot read that
		// setting off the server it was built from: its own
		// SetKeepAlivesEnabled sets both (the front is set below).
		{"keep-alives-disabled", hello, func(s *http.Server) { s.SetKeepAlivesEnabled(false) },
			[]string{get("/a"), get("/b", "Connection: close")}, "/a: front, /b: "},
		// nil Handler: net/http serves http.DefaultServeMux.
		{"nil-handler-default-serve-mux", nil, nil,
			[]string{get("/h1-test-default-mux"), get("/h1-test-default-mux", "Connection: close")}, ""},
		{"max-header-bytes-small-head-fits-net-http", hello, func(s *http.Server) { s.MaxHeaderBytes = 200 },
			[]string{get("/a", bigField), get("/b", "Connection: close")}, "/a: net/http, /b: net/http"},
		{"max-header-bytes-too-large", hello, func(s *http.Server) { s.MaxHeaderBytes = 200 },
			[]string{get("/a", hugeField)}, "/a: "},
		{"max-header-bytes-exact", hello, func(s *http.Server) { s.MaxHeaderBytes = max(len(exactA), len(exactB)) },
			[]string{exactA, exactB}, "/exact-a: front, /exact-b: front"},
		// MaxHeaderBytes 1 (not 0, the default): no head fits the front.
		{"max-header-bytes-1", hello, func(s *http.Server) { s.MaxHeaderBytes = 1 },
			[]string{get("/a"), get("/b", "Connection: close")}, "/a: net/http, /b: net/http"},
		// IdleTimeout of 1 ns (not 0, none): the connection closes once
		// its first request is answered, unless the next one is there.
		{"idle-timeout-1ns", hello, func(s *http.Server) { s.IdleTimeout = 1 },
			[]string{get("/a"), get("/b", "Connection: close")}, "/a: front, /b: front"},
		// A head whose lines end in a bare LF: net/http reads it (its
		// line reader ends a line at LF), the front hands it over at its
		// blank line rather than wait for a "\r\n\r\n" that never comes.
		{"bare-lf-head", hello, nil,
			[]string{"GET /lf HTTP/1.1\nHost: a\n\n", get("/b", "Connection: close")}, "/lf: net/http, /b: net/http"},
		{"bare-lf-blank-line", hello, nil,
			[]string{"GET /lf-crlf HTTP/1.1\r\nHost: a\n\r\n", get("/b", "Connection: close")}, "/lf-crlf: net/http, /b: net/http"},
		// A bare LF before the request line: net/http answers 400 (it
		// reads an empty request line); the front hands it over at
		// once, rather than wait for a head it has already read.
		{"leading-bare-lf", hello, nil,
			[]string{"\n" + get("/lf-first", "Connection: close")}, "/lf-first: "},
		{"options-asterisk", hello, nil,
			[]string{reqHead("OPTIONS * HTTP/1.1", "Host: a", "Connection: close")}, "*: "},
		{"options-asterisk-disabled-general-handler", hello, func(s *http.Server) { s.DisableGeneralOptionsHandler = true },
			[]string{reqHead("OPTIONS * HTTP/1.1", "Host: a", "Connection: close")}, "*: net/http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, plain := startPlain(t, tc.handler, tc.config)
			// Whose writers serve the requests on the front's side (a
			// nil handler stays nil: what the case is about).
			var seen servedLog
			frontHandler := tc.handler
			if frontHandler != nil {
				frontHandler = seen.wrap(frontHandler)
			}
			fs, _, front := startFront(t, frontHandler, tc.config)
			if tc.name == "keep-alives-disabled" {
				fs.SetKeepAlivesEnabled(false)
			}
			for _, pipelined := range []bool{false, true} {
				want := exchange(t, plain, tc.reqs, pipelined)
				got := exchange(t, front, tc.reqs, pipelined)
				if got != want {
					t.Errorf("pipelined %v: %s", pipelined, describeDiff(want, got))
				}
			}
			if tc.handler == nil {
				return
			}
			var by []string
			for _, raw := range tc.reqs {
				_, target, _ := strings.Cut(raw, " ")
				path, _, _ := strings.Cut(target, " ")
				by = append(by, path+": "+seen.servers(path))
			}
			if got := strings.Join(by, ", "); got != tc.served {
				t.Errorf("served by %q, want %q", got, tc.served)
			}
		})
	}
}

// TestServerConnState compares the ConnState hook's calls for a
// connection with two requests, the second with Connection: close.
//
// Found in review (ConnState), now fixed: net/http calls srv.ConnState for each connection
// (StateNew, StateActive, StateIdle, StateClosed); the front never
// calls it for the connections it serves, and for those it hands over
// net/http reports the *handedConn, not the accepted connection, and
// only from the hand-over on.
func TestServerConnState(t *testing.T) {
	type call struct {
		conn  string
		state http.ConnState
	}
	record := func() (func(*http.Server), func() []call) {
		var mu sync.Mutex
		var calls []call
		return func(s *http.Server) {
				s.ConnState = func(c net.Conn, st http.ConnState) {
					mu.Lock()
					defer mu.Unlock()
					calls = append(calls, call{fmt.Sprintf("%T", c), st})
				}
			}, func() []call {
				mu.Lock()
				defer mu.Unlock()
				return append([]call(nil), calls...)
			}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%q", b)
	})
	for _, tc := range []struct {
		name string
		reqs []string
	}{
		{"front-served", []string{get("/a"), get("/b", "Connection: close")}},
		{"handed-off", []string{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx", get("/b", "Connection: close")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plainConfig, plainCalls := record()
			frontConfig, frontCalls := record()
			_, plain := startPlain(t, h, plainConfig)
			_, _, front := startFront(t, h, frontConfig)
			exchange(t, plain, tc.reqs, false)
			exchange(t, front, tc.reqs, false)
			// The hook's last call (StateClosed) may come just after
			// the client saw the connection close.
			closed := func(calls []call) bool {
				return len(calls) > 0 && calls[len(calls)-1].state == http.StateClosed
			}
			for deadline := time.Now().Add(5 * time.Second); !closed(plainCalls()) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			for deadline := time.Now().Add(500 * time.Millisecond); !closed(frontCalls()) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			want, got := plainCalls(), frontCalls()
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("ConnState calls:\nnet/http %v\nfront    %v", want, got)
			}
		})
	}
}

// TestServerContextCanceledAfterHandler: as net/http, a request's
// context is canceled once its handler has returned.
func TestServerContextCanceledAfterHandler(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.Context().Err(); err != nil {
			t.Errorf("context already done in the handler: %v", err)
		}
		ctxs <- r.Context()
		io.WriteString(w, "ok")
	})
	_, _, addr := startFront(t, h, nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, c, br, "GET")
	ctx := <-ctxs
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Error("request's context not canceled after its handler returned")
	}
}

// TestServerServeAfterShutdown: as net/http's, Serve after Shutdown or
// Close returns ErrServerClosed at once, and closes the listener.
func TestServerServeAfterShutdown(t *testing.T) {
	for _, stop := range []string{"Shutdown", "Close"} {
		t.Run(stop, func(t *testing.T) {
			front := New(&http.Server{Handler: http.HandlerFunc(echo), ErrorLog: log.New(io.Discard, "", 0)})
			if stop == "Shutdown" {
				if err := front.Shutdown(context.Background()); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			} else if err := front.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			ln := listen(t)
			done := make(chan error, 1)
			go func() { done <- front.Serve(ln) }()
			select {
			case err := <-done:
				if !errors.Is(err, http.ErrServerClosed) {
					t.Errorf("Serve: %v, want ErrServerClosed", err)
				}
			case <-time.After(10 * time.Second):
				front.Close()
				t.Fatal("Serve did not return")
			}
			if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
				c.Close()
				t.Error("listener still accepts after Serve returned")
			}
		})
	}
}

// TestServerWatchDelay: WatchClient(d) starts the watch d from now, not
// before: a client that leaves earlier is not noticed until then (the
// handler still runs, its context alive), and is noticed after it.
func TestServerWatchDelay(t *testing.T) {
	// On a connection's first request the watch's timer is made; on a
	// later one it is reset: both must wait the delay asked for.
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("later-request=%v", later), func(t *testing.T) {
			errs := make(chan [2]error, 1)
			entered := make(chan struct{}, 1)
			_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.(interface{ WatchClient(time.Duration) }).WatchClient(time.Second)
				if r.URL.Path == "/quick" {
					io.WriteString(w, "quick") // done before the watch starts
					return
				}
				entered <- struct{}{}
				// The client is gone 100 ms into the request (below): at
				// 600 ms the watch has not started; within 10 s of its
				// start it has seen the client leave.
				time.Sleep(600 * time.Millisecond)
				before := r.Context().Err()
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
				errs <- [2]error{before, r.Context().Err()}
			}), nil)
			c := dial(t, addr)
			if later {
				br := bufio.NewReader(c)
				io.WriteString(c, "GET /quick HTTP/1.1\r\nHost: a\r\n\r\n")
				if resp, body := readResponse(t, c, br, "GET"); resp.StatusCode != http.StatusOK || body != "quick" {
					t.Fatalf("first request: %d %q", resp.StatusCode, body)
				}
			}
			io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
			waitEntered(t, entered)
			time.Sleep(100 * time.Millisecond)
			c.Close()
			got := <-errs
			if got[0] != nil {
				t.Errorf("context %v before the watch's start (1 s), want alive", got[0])
			}
			if !errors.Is(got[1], context.Canceled) {
				t.Errorf("context %v after the watch's start, want context.Canceled", got[1])
			}
		})
	}
}

// TestServerWatchPipelinedPastBuffer: a watched request followed, in one
// write, by more pipelined requests than the read buffer holds: the
// watch fills the buffer and stops (it must not read past it), and every
// request is answered, in order.
func TestServerWatchPipelinedPastBuffer(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.(interface{ WatchClient(time.Duration) }).WatchClient(0)
			time.Sleep(200 * time.Millisecond)
		}
		io.WriteString(w, r.URL.Path)
	}), nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	var b strings.Builder
	b.WriteString("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	const n = 400 // about 12 KiB
	for i := range n {
		b.WriteString("GET /p" + strconv.Itoa(i) + " HTTP/1.1\r\nHost: a\r\n\r\n")
	}
	if b.Len() < 3*readBuffer/2 {
		t.Fatalf("%d bytes pipelined, want well past the buffer", b.Len())
	}
	io.WriteString(c, b.String())
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := -1; i < n; i++ {
		want := "/slow"
		if i >= 0 {
			want = "/p" + strconv.Itoa(i)
		}
		resp, body := readResponse(t, c, br, "GET")
		if resp.StatusCode != http.StatusOK || body != want {
			t.Fatalf("answer %d: %d %q, want 200 %q", i+1, resp.StatusCode, body, want)
		}
	}
}

// TestServerBaseContext: srv.BaseContext is the base of every request's
// context, the front's and net/http's, and is handed a listener with
// the address served.
func TestServerBaseContext(t *testing.T) {
	type ctxKey struct{}
	var mu sync.Mutex
	var addrs []net.Addr
	_, _, addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := r.Context().Value(ctxKey{}).(string)
		fmt.Fprintf(w, "%s: %s", served(w), v)
	}), func(srv *http.Server) {
		srv.BaseContext = func(l net.Listener) context.Context {
			mu.Lock()
			addrs = append(addrs, l.Addr())
			mu.Unlock()
			return context.WithValue(context.Background(), ctxKey{}, "base")
		}
	})
	for _, tc := range []struct{ req, who string }{
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "front"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", "net/http"},
	} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		io.WriteString(c, tc.req)
		if _, body := readResponse(t, c, br, "GET"); body != tc.who+": base" {
			t.Errorf("got %q, want %q", body, tc.who+": base")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range addrs {
		if a == nil || a.String() != addr {
			t.Errorf("BaseContext's listener has the address %v, want %s", a, addr)
		}
	}
}

// TestServerIdleReadTimeout: without IdleTimeout, ReadTimeout bounds the
// wait for a connection's next request, as net/http's idle timeout.
func TestServerIdleReadTimeout(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), func(srv *http.Server) { srv.ReadTimeout = 200 * time.Millisecond })
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, get("/a"))
	readResponse(t, c, br, "GET")
	if d := expectClosed(t, c, br, 5*time.Second); d < 100*time.Millisecond {
		t.Errorf("closed %v after the answer, before ReadTimeout", d)
	}
}

// TestServerLargeHeadDeadlineEnds: a head larger than the front's buffer
// is handed to net/http part-read, under read_header_timeout from its
// first byte; once its blank line is read (after CRLF or a bare LF, as
// net/http reads lines) that deadline no longer holds, and the
// connection waits for its next request as long as net/http lets it.
func TestServerLargeHeadDeadlineEnds(t *testing.T) {
	_, _, addr := startFront(t, http.HandlerFunc(echo), func(srv *http.Server) {
		srv.ReadHeaderTimeout = 300 * time.Millisecond
	})
	for _, tc := range []struct {
		eol  string
		size int // the head's
	}{
		{"\r\n", readBuffer + 1000},
		{"\n", readBuffer + 1000},
		// The blank line cut by the end of what the front read (its
		// buffer, full): its end comes in net/http's own read.
		{"\r\n", readBuffer + 1}, {"\r\n", readBuffer + 2}, {"\r\n", readBuffer + 3},
		{"\n", readBuffer + 1},
	} {
		t.Run(fmt.Sprintf("%q-%d", tc.eol, tc.size), func(t *testing.T) {
			t.Parallel()
			start := "GET /big HTTP/1.1" + tc.eol + "Host: a" + tc.eol + "X-Big: "
			head := start + strings.Repeat("x", tc.size-len(start)-2*len(tc.eol)) + tc.eol + tc.eol
			c := dial(t, addr)
			br := bufio.NewReader(c)
			io.WriteString(c, head)
			if _, body := readResponse(t, c, br, "GET"); body != `net/http GET /big ""` {
				t.Errorf("got %q", body)
			}
			time.Sleep(500 * time.Millisecond)
			io.WriteString(c, get("/next", "Connection: close"))
			if _, body := readResponse(t, c, br, "GET"); body != `net/http GET /next ""` {
				t.Errorf("next request got %q", body)
			}
		})
	}
}

// TestServerHeadDeadlines compares, with net/http, when a connection
// whose head comes slowly or in pieces is closed, and what it is sent:
// a connection's first head has read_header_timeout from the accept, a
// later one from its first byte (a pipelined one too), and the wait for
// the next request has the idle timeout (none without one), whatever
// deadline the head before it had.
func TestServerHeadDeadlines(t *testing.T) {
	type step struct {
		at   time.Duration // from the connect
		send string
	}
	ok := func(path string) string { return get(path) }
	for _, tc := range []struct {
		name     string
		rht      time.Duration
		idle     time.Duration
		steps    []step
		closedBy bool // closed by the server within the test (else it stays open)
	}{
		{"first-head-from-accept", 600 * time.Millisecond, 5 * time.Second,
			[]step{{400 * time.Millisecond, "GET / HTTP/1.1\r\n"}}, true},
		{"later-head-from-first-byte", 600 * time.Millisecond, 5 * time.Second,
			[]step{{0, ok("/1")}, {400 * time.Millisecond, "GET /2 HTTP/1.1\r\n"}}, true},
		{"pipelined-partial-head-from-its-read", 600 * time.Millisecond, 5 * time.Second,
			[]step{{400 * time.Millisecond, ok("/1") + "GET /2 HTTP/1.1\r\n"}}, true},
		{"split-head-then-idle", 200 * time.Millisecond, 5 * time.Second,
			[]step{{0, ok("/1")}, {50 * time.Millisecond, "GET /2 HTTP/1.1\r\n"}, {100 * time.Millisecond, "Host: a\r\n\r\n"},
				{400 * time.Millisecond, get("/3", "Connection: close")}}, true},
		// As split-head-then-idle, with an idle timeout no longer than
		// shedAfter (the wait's own deadline, not shedAfter's first):
		// the wait after the split head still gets the idle timeout
		// from the answer on, not what was left of the head's.
		{"split-head-then-short-idle", 400 * time.Millisecond, time.Second,
			[]step{{0, ok("/1")}, {20 * time.Millisecond, "GET /2 HTTP/1.1\r\n"}, {40 * time.Millisecond, "Host: a\r\n\r\n"},
				{700 * time.Millisecond, get("/3", "Connection: close")}}, true},
		{"no-idle-timeout", 200 * time.Millisecond, 0,
			[]step{{0, ok("/1")}, {500 * time.Millisecond, get("/2", "Connection: close")}}, true},
		// A head larger than the front's buffer, its first half sent at
		// once and the rest late, and never ended: the front hands it to
		// net/http when its buffer fills (400 ms in), and net/http's own
		// read_header_timeout from then must not outlast the head's from
		// the accept. A slowloris gains nothing by filling the buffer
		// slowly.
		{"large-head-handed-late", 600 * time.Millisecond, 5 * time.Second,
			[]step{{0, "GET /big HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", readBuffer/2)},
				{400 * time.Millisecond, strings.Repeat("x", readBuffer)}}, true},
		// The same head pipelined after a first request answered: the
		// second head's deadline runs from its first byte (sent with the
		// first request), not from the hand-over.
		{"large-second-head-handed-late", 600 * time.Millisecond, 5 * time.Second,
			[]step{{0, ok("/1") + "GET /big HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", readBuffer/2)},
				{400 * time.Millisecond, strings.Repeat("x", readBuffer)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			config := func(srv *http.Server) {
				srv.ReadHeaderTimeout = tc.rht
				srv.IdleTimeout = tc.idle
			}
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
			_, plain := startPlain(t, h, config)
			_, _, front := startFront(t, h, config)
			run := func(addr string) (string, time.Duration) {
				c := dial(t, addr)
				start := time.Now()
				type result struct {
					rec *recorder
					at  time.Duration
				}
				done := make(chan result, 1)
				go func() {
					rec := &recorder{c: c}
					c.SetReadDeadline(start.Add(3 * time.Second))
					var b [4096]byte
					for {
						n, err := c.Read(b[:])
						rec.buf = append(rec.buf, b[:n]...)
						if err != nil {
							rec.err = err
							break
						}
					}
					done <- result{rec, time.Since(start)}
				}()
				for _, s := range tc.steps {
					time.Sleep(time.Until(start.Add(s.at)))
					io.WriteString(c, s.send)
				}
				r := <-done
				return r.rec.transcript(), r.at
			}
			want, wantAt := run(plain)
			got, gotAt := run(front)
			if got != want {
				t.Errorf("%s", describeDiff(want, got))
			}
			if d := gotAt - wantAt; d < -250*time.Millisecond || d > 250*time.Millisecond {
				t.Errorf("front closed the connection %v after the connect, net/http %v", gotAt, wantAt)
			}
			if tc.closedBy && strings.HasSuffix(got, "<connection left open>") {
				t.Errorf("front left the connection open")
			}
		})
	}
}

// TestServerHandedHijackClearsDeadlines: a handler that gives a
// connection handed to net/http read and write deadlines (as the proxy's
// send_timeout does) and then hijacks it (an upgrade) has none left on
// the connection it takes, as net/http's own hijack clears them: the
// tunnel then reads and writes long after they would have passed.
func TestServerHandedHijackClearsDeadlines(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is left unread: net/http's hijack then has no
		// background read to abort, whose end would clear the read
		// deadline by itself; the tunnel reads it first.
		rc := http.NewResponseController(w)
		soon := time.Now().Add(50 * time.Millisecond)
		rc.SetReadDeadline(soon)
		rc.SetWriteDeadline(soon)
		c, brw, err := rc.Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		time.Sleep(200 * time.Millisecond) // past both deadlines
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nready\n"); err != nil {
			t.Errorf("write on the hijacked connection: %v", err)
			return
		}
		line, err := brw.ReadString('\n')
		if err != nil {
			t.Errorf("read on the hijacked connection: %v", err)
			return
		}
		io.WriteString(c, "echo "+line)
	})
	_, plain := startPlain(t, h, nil)
	_, _, front := startFront(t, h, nil)
	for _, addr := range []string{plain, front} {
		// A body: the front hands the request to net/http.
		c := dial(t, addr)
		io.WriteString(c, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nhi")
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var got strings.Builder
		for !strings.HasSuffix(got.String(), "ready\n") {
			b, err := br.ReadByte()
			if err != nil {
				t.Fatalf("%s: %v after %q", addr, err, got.String())
			}
			got.WriteByte(b)
		}
		io.WriteString(c, "ping\n")
		line, err := br.ReadString('\n')
		if err != nil || line != "echo hiping\n" {
			t.Errorf("%s: tunnel answered %q, %v; want the body and ping echoed", addr, line, err)
		}
	}
}

// noHalfClose is a connection without CloseWrite (a wrapper such as a
// PROXY protocol reader may be one).
type noHalfClose struct{ net.Conn }

type noHalfCloseListener struct{ net.Listener }

func (l noHalfCloseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return noHalfClose{c}, nil
}

// TestServerConnContextNoHalfClose: ConnContext sees the connection as
// accepted for a connection handed to net/http that cannot half-close,
// not the front's wrapper of it.
func TestServerConnContextNoHalfClose(t *testing.T) {
	type ctxKey struct{}
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := r.Context().Value(ctxKey{})
			fmt.Fprintf(w, "%s %T", served(w), c)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, c)
		},
	}
	ln := listen(t)
	front := New(srv)
	done := make(chan error, 1)
	go func() { done <- front.Serve(noHalfCloseListener{ln}) }()
	t.Cleanup(func() {
		front.Close()
		<-done
	})
	for _, tc := range []struct{ req, want string }{
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "front h1.noHalfClose"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", "net/http h1.noHalfClose"},
	} {
		c := dial(t, ln.Addr().String())
		br := bufio.NewReader(c)
		io.WriteString(c, tc.req)
		if _, body := readResponse(t, c, br, "GET"); body != tc.want {
			t.Errorf("got %q, want %q", body, tc.want)
		}
	}
}
