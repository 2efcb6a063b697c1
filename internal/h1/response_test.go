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
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// silence is how long a read waits for more bytes before the exchange
// counts the connection as left open.
const silence = 2 * time.Second

// listen returns a listener on 127.0.0.1, closed at the test's end.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// quietLog is an ErrorLog that keeps what it is told, for tests to read.
type quietLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *quietLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *quietLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startPlain serves h with a plain net/http server; it returns the
// server and its address.
func startPlain(t *testing.T, h http.Handler, config func(*http.Server)) (*http.Server, string) {
	t.Helper()
	ln := listen(t)
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	if config != nil {
		config(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("net/http Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv, ln.Addr().String()
}

// startFront serves h with the front built from a net/http server; it
// returns the front, the server it was built from, and its address.
func startFront(t *testing.T, h http.Handler, config func(*http.Server)) (*Server, *http.Server, string) {
	t.Helper()
	ln := listen(t)
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	if config != nil {
		config(srv)
	}
	front := New(srv)
	done := make(chan error, 1)
	go func() { done <- front.Serve(ln) }()
	t.Cleanup(func() {
		front.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("front Serve returned %v, want ErrServerClosed", err)
		}
	})
	return front, srv, ln.Addr().String()
}

// recorder keeps every byte read from a connection, each read waiting
// at most silence.
type recorder struct {
	c   net.Conn
	buf []byte
	err error
}

func (r *recorder) Read(p []byte) (int, error) {
	r.c.SetReadDeadline(time.Now().Add(silence))
	n, err := r.c.Read(p)
	r.buf = append(r.buf, p[:n]...)
	if err != nil {
		r.err = err
	}
	return n, err
}

var dateValue = regexp.MustCompile(`(?m)^Date: [^\r\n]*\r$`)

// transcript is what a server sent, with Date's value masked, and
// whether it closed the connection.
func (r *recorder) transcript() string {
	s := dateValue.ReplaceAllString(string(r.buf), "Date: <date>\r")
	var ne net.Error
	if errors.As(r.err, &ne) && ne.Timeout() {
		return s + "\n<connection left open>"
	}
	return s + "\n<connection closed>"
}

// exchange sends reqs over one raw connection to addr, all in one write
// (pipelined) or each after the previous answer, and returns what the
// server sent (transcript).
func exchange(t *testing.T, addr string, reqs []string, pipelined bool) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := &recorder{c: c}
	br := bufio.NewReader(rec)
	if pipelined {
		if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, br)
		return rec.transcript()
	}
	for i, raw := range reqs {
		if _, err := io.WriteString(c, raw); err != nil {
			break // closed by the server: the transcript says so
		}
		if i == len(reqs)-1 {
			io.Copy(io.Discard, br)
			break
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			t.Fatalf("bad test request %q: %v", raw, err)
		}
		for {
			resp, err := http.ReadResponse(br, req)
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 1 || resp.StatusCode == http.StatusSwitchingProtocols {
				break
			}
		}
		if rec.err != nil {
			break
		}
	}
	return rec.transcript()
}

// describeDiff shows where two transcripts part.
func describeDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-300)
	clip := func(s string) string {
		end := min(len(s), i+300)
		if from > len(s) {
			return ""
		}
		return s[from:end]
	}
	return fmt.Sprintf("first difference at byte %d (net/http %d bytes, front %d bytes)\nnet/http: …%q…\nfront:    …%q…", i, len(want), len(got), clip(want), clip(got))
}

func get(path string, fields ...string) string {
	return reqHead("GET "+path+" HTTP/1.1", append([]string{"Host: example.com"}, fields...)...)
}

func headReq(path string, fields ...string) string {
	return reqHead("HEAD "+path+" HTTP/1.1", append([]string{"Host: example.com"}, fields...)...)
}

// writes returns a handler body that writes n bytes of text in writes
// of the given sizes (repeating the last).
func writes(w http.ResponseWriter, total int, sizes ...int) {
	const text = "The quick brown fox jumps over the lazy dog.\n"
	body := strings.Repeat(text, total/len(text)+1)[:total]
	for i := 0; len(body) > 0; i++ {
		n := sizes[min(i, len(sizes)-1)]
		n = min(n, len(body))
		w.Write([]byte(body[:n]))
		body = body[n:]
	}
}

type responseCase struct {
	name    string
	handler func(w http.ResponseWriter, r *http.Request)
	// reqs are the raw requests, with %s for the case's path; nil: a
	// GET, then a GET with Connection: close (so reads end).
	reqs []string
}

var responseCases = []responseCase{
	{name: "429-fields-and-length", handler: func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-B", "2")
		h.Set("X-A", "1")
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h.Set("Retry-After", "5")
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Length", "11")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "rate limit\n")
	}},
	{name: "small-body", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, world")
	}},
	{name: "small-body-html-two-writes", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html><body>")
		io.WriteString(w, "hi</body></html>")
	}},
	{name: "body-exactly-2048", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 2048, 2048)
	}},
	{name: "body-2048-then-1", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 2049, 2048, 1)
	}},
	// Found in review (chunk boundaries), now fixed: net/http buffers the body in a 2048-byte
	// bufio.Writer, so its chunks are 2048 bytes (the buffer filled) and
	// then what is left at the end; the front sends what it held (2000
	// bytes) as one chunk and then each later Write as its own chunk.
	{name: "body-3000-in-1000s", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 3000, 1000)
	}},
	// Found in review (chunk boundaries), now fixed, as body-3000-in-1000s.
	{name: "body-5000-in-1000s", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 5000, 1000)
	}},
	// Found in review (chunk boundaries), now fixed, as body-3000-in-1000s.
	{name: "body-10000-mixed-writes", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 10000, 100, 3000, 17, 5000, 700)
	}},
	// Found in review (sniffing), now fixed: a first Write larger than 2048 bytes: net/http
	// sniffs a Content-Type from it; the front commits the head on the
	// (empty) bytes it held and sends no Content-Type.
	{name: "body-5000-one-write", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 5000, 5000)
	}},
	// Found in review (sniffing), now fixed, as body-5000-one-write, at 2049 bytes.
	{name: "body-2049-one-write", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 2049, 2049)
	}},
	// Found in review (sniffing), now fixed: 10 text bytes held, then a binary write past 2048:
	// net/http sniffs the first 2048 bytes (binary: octet-stream), the
	// front only the 10 it held (text/plain).
	{name: "body-sniff-on-held-bytes-only", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "plain text")
		w.Write(make([]byte, 3000))
	}},
	{name: "body-5000-aligned-on-2048", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 5000, 2048, 2048, 904) // chunks net/http and the front cut alike
	}},
	{name: "body-with-length-5000-in-1000s", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5000")
		writes(w, 5000, 1000)
	}},
	{name: "flush-in-the-middle", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part one;")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part two")
	}},
	{name: "flush-first", handler: func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		io.WriteString(w, "after flush")
	}},
	{name: "flush-only", handler: func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
	}},
	{name: "flush-with-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "01234")
		w.(http.Flusher).Flush()
		io.WriteString(w, "56789")
	}},
	{name: "response-controller-flush", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a")
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		io.WriteString(w, "b")
	}},
	{name: "head-with-body-writes", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html>hello")
	}},
	{name: "head-without-writes", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Head", "1")
	}},
	{name: "head-with-length", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1234")
	}},
	{name: "head-with-length-and-writes", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	}},
	{name: "head-large-writes-in-1000s", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 5000, 1000)
	}},
	// Found in review (sniffing), now fixed, as body-5000-one-write, for HEAD.
	{name: "head-large-one-write", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 5000, 5000)
	}},
	// HEAD with Transfer-Encoding and Content-Length: neither field in
	// the head (the length is dropped for the encoding, the encoding for
	// HEAD).
	{name: "head-te-gzip-and-length", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "gzip")
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	}},
	{name: "head-te-identity", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		io.WriteString(w, "x")
	}},
	{name: "204-with-type-and-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "5")
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("X-Kept", "1")
		w.WriteHeader(http.StatusNoContent)
		if _, err := io.WriteString(w, "hello"); !errors.Is(err, http.ErrBodyNotAllowed) {
			panic(fmt.Sprintf("Write on 204: %v", err))
		}
	}},
	// An empty Write is no body: it succeeds on a status without one.
	{name: "204-empty-write", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		if n, err := w.Write(nil); n != 0 || err != nil {
			panic(fmt.Sprintf("empty Write on 204: %d, %v", n, err))
		}
	}},
	{name: "304-with-type-and-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "5")
		w.Header().Set("ETag", `"abc"`)
		w.WriteHeader(http.StatusNotModified)
		io.WriteString(w, "hello")
	}},
	{name: "103-then-200", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Link", "</style.css>; rel=preload; as=style")
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Add("Link", "</app.js>; rel=preload; as=script")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
	}},
	{name: "100-then-201", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusContinue)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}},
	{name: "handler-connection-close", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	}},
	{name: "handler-connection-close-with-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Length", "3")
		io.WriteString(w, "bye")
	}},
	{name: "handler-connection-Close-capital", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Close")
		io.WriteString(w, "bye")
	}},
	{name: "handler-connection-keep-alive-request-close", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "keep-alive")
		io.WriteString(w, "x")
	}},
	// Found in review (Connection), now fixed: the request asks to close; the handler's
	// Connection field has two values, "keep-alive" then "close".
	// net/http looks at the first value only (hasToken on
	// header.get), deletes the field and writes "Connection: close";
	// the front finds "close" in the second value and writes both
	// handler values.
	{name: "handler-connection-two-values-request-close", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Connection"] = []string{"keep-alive", "close"}
		io.WriteString(w, "x")
	}},
	// Found in review (Connection), now fixed: the request asks to close; the handler's
	// Connection field is "foo close": net/http's hasToken finds "close"
	// (space is a token boundary to it) and keeps the field as is; the
	// front splits on commas only, drops the field and adds
	// "Connection: close".
	{name: "handler-connection-space-token-request-close", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "foo close")
		io.WriteString(w, "x")
	}},
	{name: "te-identity", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		io.WriteString(w, "streamed")
	}},
	{name: "te-identity-with-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		w.Header().Set("Content-Length", "8")
		io.WriteString(w, "streamed")
	}},
	// Found in review (Transfer-Encoding), now fixed: identity set, WriteHeader, then the field
	// deleted before the first Write: net/http decided on the header as
	// it was at WriteHeader (identity: no chunking, close); the front
	// looks at the field again at commit and chunks.
	{name: "te-identity-deleted-after-writeheader", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		w.WriteHeader(http.StatusOK)
		w.Header().Del("Transfer-Encoding")
		io.WriteString(w, "streamed")
	}},
	{name: "te-chunked-explicit", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		io.WriteString(w, "chunks")
	}},
	{name: "te-gzip", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "gzip")
		io.WriteString(w, "not really gzip")
	}},
	{name: "te-chunked-and-length-exact", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	}},
	// Found in review (Content-Length with Transfer-Encoding), now fixed: the handler sets
	// Transfer-Encoding: chunked and Content-Length: 5 and writes 10
	// bytes. net/http drops the Content-Length field but still holds the
	// handler to 5 bytes (the Write fails with ErrContentLength, the
	// connection closes); the front forgets the length, sends the 10
	// bytes and keeps the connection.
	{name: "te-chunked-and-length-overrun", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "0123456789")
	}},
	// Found in review (empty Transfer-Encoding), now fixed: the handler sets
	// "Transfer-Encoding: " (empty) and writes a small body. net/http
	// deletes the field once it gives the automatic Content-Length; the
	// front has already written it ("Transfer-Encoding: " then
	// "Content-Length: 5").
	{name: "te-empty-value-small-body", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "")
		io.WriteString(w, "hello")
	}},
	// Found in review (header snapshot with an empty Transfer-Encoding), now fixed: the
	// handler sets "Transfer-Encoding: " (empty), writes (WriteHeader
	// 200), then sets X-Late before the head goes out. net/http writes
	// the header as it was at WriteHeader (no X-Late); the front writes
	// "X-Late: 1" in the head. (Found by TestResponseRandomScripts.)
	{name: "te-empty-then-late-field", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "")
		io.WriteString(w, "hello")
		w.Header().Set("X-Late", "1")
		w.Header().Set("Content-Encoding", "gzip")
	}},
	{name: "late-field-after-write", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Early", "1")
		io.WriteString(w, "hello")
		w.Header().Set("X-Late", "1")
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("X-T", "t")
	}},
	// Found in review (Content-Length with Transfer-Encoding), now fixed, as
	// te-chunked-and-length-overrun: Transfer-Encoding: gzip and
	// Content-Length: 5, nothing written. net/http still holds the
	// handler to 5 bytes and closes the connection (0 written); the
	// front keeps it and answers the next request.
	{name: "te-gzip-and-length-nothing-written", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "gzip")
		w.Header().Set("Content-Length", "5")
	}},
	{name: "content-encoding-no-sniff", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		io.WriteString(w, "<html>")
	}},
	{name: "content-encoding-empty-sniffs", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "")
		io.WriteString(w, "<html>")
	}},
	{name: "content-type-empty-no-sniff", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		io.WriteString(w, "<html>")
	}},
	{name: "noncanonical-content-type-key", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header()["content-type"] = []string{"text/plain"}
		io.WriteString(w, "<html>")
	}},
	{name: "handler-sets-date", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT")
		io.WriteString(w, "x")
	}},
	{name: "handler-date-nil", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil
		io.WriteString(w, "x")
	}},
	{name: "header-changed-after-writeheader", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Early", "1")
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-Late", "1")
		w.Header().Set("Content-Type", "text/late")
		w.Header().Del("X-Early")
		io.WriteString(w, "x")
	}},
	{name: "trailers-declared", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum, x-other,, Content-Length, Host")
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set("X-Other", "o")
		w.Header().Set("Content-Length", "99")
	}},
	{name: "trailers-declared-two-fields", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Trailer", "X-B")
		w.Header().Add("Trailer", "X-A")
		w.WriteHeader(http.StatusOK)
		w.Header().Set("X-A", "a")
		w.Header().Add("X-B", "b1")
		w.Header().Add("X-B", "b2")
	}},
	{name: "trailers-prefix", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "body")
		w.Header().Set(http.TrailerPrefix+"X-T", "t\r\nv ")
		w.Header().Set(http.TrailerPrefix+"X-A", "a")
	}},
	{name: "trailers-prefix-before-write", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(http.TrailerPrefix+"X-T", "early")
		io.WriteString(w, "body")
	}},
	{name: "trailers-both", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-D")
		writes(w, 3000, 2048, 952) // chunks net/http and the front cut alike
		w.Header().Set("X-D", "d")
		w.Header().Set(http.TrailerPrefix+"X-P", "p")
	}},
	// Found in review (TrailerPrefix after the head), now fixed: the documented use of
	// http.TrailerPrefix, trailers not known before the head is
	// written: the handler flushes, then sets "Trailer:X-T". net/http
	// collects TrailerPrefix keys from the handler's header when it
	// ends the body and sends X-T as a trailer; the front decides
	// whether there are trailers at WriteHeader and sends none.
	{name: "trailers-prefix-after-flush", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-T", "late")
	}},
	// Found in review (TrailerPrefix after the head), now fixed, as trailers-prefix-after-flush,
	// with the head sent because the body passed 2048 bytes.
	{name: "trailers-prefix-after-large-body", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 3000, 2048, 952)
		w.Header().Set(http.TrailerPrefix+"X-T", "late")
	}},
	{name: "trailers-with-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-D")
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "body")
		w.Header().Set("X-D", "d")
	}},
	// Found in review (trailers), now fixed: a Trailer value with a trailing U+00A0: net/http
	// trims ASCII whitespace only, declares "X-T\u00a0" (no such
	// field: no trailer); the front trims with strings.TrimSpace,
	// declares X-T and sends it as a trailer.
	{name: "trailers-declared-nbsp", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T\u00a0")
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
	}},
	{name: "header-values-crlf-and-spaces", handler: func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Inject", "a\r\nSet-Cookie: evil=1")
		h["X-Padded"] = []string{"  padded  ", "\tt\t", " \r\n x \n"}
		h.Set("X-Lf", "a\nb\rc")
		h.Set("X-Empty", "")
		io.WriteString(w, "x")
	}},
	{name: "invalid-field-names", handler: func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Bad Name"] = []string{"v"}
		h["X:Colon"] = []string{"v"}
		h["X\r\nInjected"] = []string{"v"}
		h[""] = []string{"empty"}
		h["X-Ok"] = []string{"ok"}
		h["x-lower"] = []string{"lower"}
		io.WriteString(w, "x")
	}},
	{name: "unknown-status-codes", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(599)
		io.WriteString(w, "x")
	}},
	{name: "status-999", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(999)
	}},
	{name: "status-199-then-200", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(199)
		w.WriteHeader(200)
	}},
	// Found in review (101), now fixed: WriteHeader(101) without Upgrade, and the request
	// asks to close. net/http treats it as a protocol switch only with
	// Upgrade and Connection: Upgrade fields, so it adds "Connection:
	// close"; the front never adds it for 101.
	{name: "status-101-without-upgrade-request-close", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusSwitchingProtocols)
	}},
	{name: "invalid-status-panics", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(42)
	}},
	{name: "status-99-panics", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(99)
	}},
	{name: "status-1000-panics", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(1000)
	}},
	// A protocol switch (Upgrade, Connection: Upgrade) keeps its
	// Connection field even when the request asked to close: no
	// "Connection: close" is added.
	{name: "status-101-with-upgrade-request-close", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Upgrade", "example/1")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
	}},
	{name: "write-more-than-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		if _, err := io.WriteString(w, "0123456789"); !errors.Is(err, http.ErrContentLength) {
			panic(fmt.Sprintf("Write past Content-Length: %v", err))
		}
	}},
	{name: "write-more-than-length-two-writes", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "01234")
		io.WriteString(w, "5")
	}},
	{name: "write-less-than-length", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "01234")
	}},
	{name: "length-zero-nothing-written", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
	}},
	// Found in review (invalid Content-Length), now fixed: net/http deletes an unparsable
	// Content-Length from the handler's header but, having cloned the
	// header at WriteHeader, still sees the field at the head: no
	// automatic Content-Length, so the body is chunked; the front sends
	// an automatic Content-Length.
	{name: "invalid-length-small-body", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "abc")
		io.WriteString(w, "hello")
	}},
	// Found in review (invalid Content-Length), now fixed, as invalid-length-small-body, for
	// HEAD: net/http writes "Content-Length: abc"; the front writes no
	// Content-Length field.
	{name: "head-invalid-length", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "-1")
	}},
	{name: "writeheader-twice", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "x")
	}},
	{name: "write-then-writeheader", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "x")
		w.WriteHeader(http.StatusInternalServerError)
	}},
	{name: "writes-nothing", handler: func(w http.ResponseWriter, r *http.Request) {}},
	{name: "writes-empty", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Write(nil)
		w.Write([]byte{})
	}},
	{name: "writeheader-only", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}},
	{name: "abort-before-write", handler: func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}},
	{name: "abort-after-writeheader", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "1")
		w.WriteHeader(http.StatusTeapot)
		panic(http.ErrAbortHandler)
	}},
	{name: "abort-after-small-write", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		panic(http.ErrAbortHandler)
	}},
	{name: "abort-after-flush", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}},
	// Found in review (abort), now fixed: 2048 then 1000 bytes, then panic(ErrAbortHandler):
	// net/http has the head and a 2048-byte chunk in its connection's
	// buffer and flushes it as it closes; the front drops what it
	// buffered and sends nothing.
	{name: "abort-after-large-write", handler: func(w http.ResponseWriter, r *http.Request) {
		writes(w, 3048, 2048, 1000)
		panic(http.ErrAbortHandler)
	}},
	{name: "panic-before-write", handler: func(w http.ResponseWriter, r *http.Request) {
		panic("boom")
	}},
	// Everything flushed, then the write deadline passes before the
	// handler returns: nothing is left to write, so nothing fails, and
	// the connection serves its next request (whose handler clears the
	// deadline first).
	{name: "flushed-then-deadline-passes", handler: func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(time.Time{})
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
		rc.Flush()
		rc.SetWriteDeadline(time.Unix(1, 0))
	}},
	// A write fails (its deadline has passed, nothing sent), with part
	// of a Write still held; the handler then clears the deadline and
	// returns. As net/http, whose buffered writers keep their error,
	// nothing goes out after the failure: not the held bytes, nor a last
	// chunk that would end the cut body as if whole.
	{name: "write-fails-then-deadline-cleared", handler: func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(time.Unix(1, 0))
		writes(w, 2048, 2048)
		writes(w, 1, 1)
		writes(w, 10000, 10000)
		rc.SetWriteDeadline(time.Time{})
	}},
	{name: "io-copy-plain-reader-511", handler: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("x", 511))})
	}},
	{name: "io-copy-plain-reader-512", handler: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("x", 512))})
	}},
	{name: "io-copy-with-type-small", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.Copy(w, struct{ io.Reader }{strings.NewReader("hello from upstream")})
	}},
	{name: "io-copy-with-type-1000", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("0123456789", 100))})
	}},
	{name: "io-copy-after-writeheader-small", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.Copy(w, struct{ io.Reader }{strings.NewReader("hello from upstream")})
	}},
	{name: "io-copy-after-write-small", handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first ")
		io.Copy(w, struct{ io.Reader }{strings.NewReader("hello from upstream")})
	}},
	// Nothing copied: no status is written, the handler may still set one.
	{name: "io-copy-empty-then-writeheader", handler: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, struct{ io.Reader }{strings.NewReader("")})
		w.WriteHeader(http.StatusNotFound)
	}},
	{name: "io-copy-204", handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		io.Copy(w, struct{ io.Reader }{strings.NewReader("no body allowed")})
	}},
	{name: "io-copy-head-1000", reqs: []string{headReq("%s"), headReq("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("0123456789", 100))})
	}},
	{name: "io-copy-plain-reader-small", handler: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, struct{ io.Reader }{strings.NewReader("hello from upstream")})
	}},
	// Found in review (ReadFrom), now fixed: io.Copy from a reader without WriteTo (an
	// upstream response's body, say) uses net/http's
	// response.ReadFrom, which, past the first 512 bytes (sniffLen),
	// flushes the head (chunked, no automatic Content-Length) and sends
	// the rest through; the front has no ReadFrom, so io.Copy calls
	// Write and the 1000-byte body gets a Content-Length.
	{name: "io-copy-plain-reader-1000", handler: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("0123456789", 100))})
	}},
	// Found in review (Hijack), now fixed: net/http's writer is an http.Hijacker for any
	// HTTP/1.1 request; the front's is not (ResponseController.Hijack
	// returns ErrNotSupported), so a handler that hijacks a request the
	// front serves cannot.
	{name: "hijack", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "hijack: "+err.Error(), http.StatusInternalServerError)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		brw.Flush()
	}},
	// A Write after Hijack writes nothing and says so (ErrHijacked).
	{name: "hijack-then-write", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "hijack: "+err.Error(), http.StatusInternalServerError)
			return
		}
		defer c.Close()
		n, err := io.WriteString(w, "after")
		_, _, err2 := http.NewResponseController(w).Hijack()
		msg := fmt.Sprintf("Write after Hijack: %d, %v; Hijack again: %v", n, err, err2)
		fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
		brw.Flush()
	}},
	// Hijack after WriteHeader: the head goes out first, whole (framed
	// as if the handler had returned then), and the connection is the
	// handler's.
	{name: "hijack-after-writeheader", reqs: []string{get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("raw bytes after the head")
		brw.Flush()
	}},
	// Found in review (EnableFullDuplex), now fixed: net/http's writer supports it (nil); the
	// front's returns ErrNotSupported.
	{name: "enable-full-duplex", handler: func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "EnableFullDuplex: %v", http.NewResponseController(w).EnableFullDuplex())
	}},
	{name: "request-connection-close", reqs: []string{get("%s", "Connection: close"), get("%s")}, handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "x")
	}},
	{name: "request-connection-keep-alive-Close", reqs: []string{get("%s", "Connection: keep-alive, Close"), get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "x")
	}},
	// Found in review (request Connection), now fixed: "Connection: clo\u017fe": the front
	// reads it as close (strings.EqualFold) and closes after the
	// first response; net/http keeps the connection and answers the
	// second request. See divergentHeads in parse_test.go.
	{name: "request-connection-long-s", reqs: []string{get("%s", "Connection: clo\u017fe"), get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "x")
	}},
	{name: "request-pragma-no-cache", reqs: []string{get("%s", "Pragma: no-cache"), get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%q %q %q %q", r.Header["Cache-Control"], r.Host, r.RequestURI, r.Method)
	}},
	{name: "request-echo", reqs: []string{get("%s?q=1&r=%41", "x-b: 2", "X-A: 1", "x-a: 3", "Content-Length: 0"), get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%q %q %q %q %q %v %d %v", r.Method, r.URL, r.RequestURI, r.Host, r.Header, r.Close, r.ContentLength, r.Proto)
	}},
	{name: "request-fields", reqs: []string{get("%s", "Accept: */*"), get("%s", "Connection: close")}, handler: func(w http.ResponseWriter, r *http.Request) {
		_, local := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		_, srv := r.Context().Value(http.ServerContextKey).(*http.Server)
		fmt.Fprintf(w, "%q %d.%d %q %v %v %v %d %T %v %v %v %q %v %v",
			r.Proto, r.ProtoMajor, r.ProtoMinor, r.TransferEncoding, r.Trailer, r.TLS == nil, r.Form == nil,
			r.ContentLength, r.Body, r.GetBody == nil, local, srv, r.Pattern, r.Response == nil, r.MultipartForm == nil)
		if r.ParseForm() != nil || len(r.Form) != 0 {
			io.WriteString(w, " form")
		}
	}},
	{name: "big-header-value", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("v", 10000))
		writes(w, 3000, 2048, 952)
	}},
	{name: "big-header-value-small-body", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("v", 5000))
		io.WriteString(w, "small")
	}},
	{name: "handed-off-second-request", reqs: []string{get("%s"), reqHead("POST %s HTTP/1.1", "Host: example.com", "Content-Length: 4", "Connection: close") + "body"}, handler: func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %q", r.Method, b)
	}},
	{name: "handed-off-malformed-second-request", reqs: []string{get("%s"), "GET / HTTP/1.1\r\nHost: a\r\nBad Field: x\r\n\r\n"}, handler: func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "x")
	}},
}

// caseHandler dispatches on the path /case/<name>.
func caseHandler(cases []responseCase) http.Handler {
	m := map[string]func(http.ResponseWriter, *http.Request){}
	for _, c := range cases {
		m["/case/"+c.name] = c.handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := m[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		h(w, r)
	})
}

func TestResponseDifferential(t *testing.T) {
	h := caseHandler(responseCases)
	_, plain := startPlain(t, h, nil)
	// Whose writer served each case on the front's side: the front's,
	// but where servedOtherwise says.
	var seen servedLog
	_, _, front := startFront(t, seen.wrap(h), nil)
	requireCloseHonoured(t, front, "/probe")
	for _, tc := range responseCases {
		reqs := tc.reqs
		if reqs == nil {
			reqs = []string{get("%s"), get("%s", "Connection: close")}
		}
		path := "/case/" + tc.name
		var raw []string
		for _, r := range reqs {
			raw = append(raw, strings.ReplaceAll(r, "%s", path))
		}
		for _, pipelined := range []bool{false, true} {
			mode := "sequential"
			if pipelined {
				mode = "pipelined"
			}
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				want := exchange(t, plain, raw, pipelined)
				got := exchange(t, front, raw, pipelined)
				if got != want {
					t.Errorf("requests %q:\n%s", raw, describeDiff(want, got))
				}
				// The exchange is over: the handler has seen its
				// requests (the other mode's too, perhaps: the same).
				wantBy, ok := servedOtherwise[tc.name]
				if !ok {
					wantBy = "front"
				}
				if by := seen.servers(path); by != wantBy {
					t.Errorf("served by %q, want %q", by, wantBy)
				}
			})
		}
	}
}

// servedOtherwise are the responseCases whose requests are not all the
// front's to serve: whose writers serve them (servedLog.servers).
var servedOtherwise = map[string]string{
	// The second request has a body: net/http's.
	"handed-off-second-request": "front+net/http",
}

// TestResponseDuringShutdown compares the response of a handler that
// is in flight when Shutdown is called: keep-alive is off then, and
// net/http answers with Connection: close.
func TestResponseDuringShutdown(t *testing.T) {
	cases := []struct {
		name    string
		handler func(w http.ResponseWriter)
	}{
		{"plain", func(w http.ResponseWriter) { io.WriteString(w, "x") }},
		{"with-length", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "1")
			io.WriteString(w, "x")
		}},
		{"handler-keep-alive", func(w http.ResponseWriter) {
			w.Header().Set("Connection", "keep-alive")
			io.WriteString(w, "x")
		}},
		// Found in review (Connection during Shutdown), now fixed: the handler sets
		// Connection: close while the server shuts down. net/http (keep-
		// alives off) deletes the handler's field and writes
		// "Connection: close" among its own fields, after Date and
		// Content-Length; the front keeps the handler's field in its
		// sorted place, before Date.
		{"handler-close", func(w http.ResponseWriter) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "x")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := func(t *testing.T, isFront bool) string {
				entered := make(chan struct{})
				release := make(chan struct{})
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					close(entered)
					<-release
					tc.handler(w)
				})
				var shutdown func(context.Context) error
				var addr string
				var seen servedLog
				if isFront {
					var f *Server
					f, _, addr = startFront(t, seen.wrap(h), nil)
					shutdown = f.Shutdown
					defer func() {
						if by := seen.servers("/"); by != "front" {
							t.Errorf("served by %q, want the front", by)
						}
					}()
				} else {
					var s *http.Server
					s, addr = startPlain(t, h, nil)
					shutdown = s.Shutdown
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, get("/"))
				select {
				case <-entered:
				case <-time.After(10 * time.Second):
					t.Fatal("handler not called")
				}
				done := make(chan error, 1)
				go func() { done <- shutdown(context.Background()) }()
				waitListenerClosed(t, addr)
				close(release)
				rec := &recorder{c: c}
				io.Copy(io.Discard, rec)
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Shutdown: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Error("Shutdown did not return")
				}
				return rec.transcript()
			}
			want := run(t, false)
			got := run(t, true)
			if got != want {
				t.Errorf("%s", describeDiff(want, got))
			}
		})
	}
}

// waitListenerClosed waits until addr refuses connections.
func waitListenerClosed(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("listener %s still accepts", addr)
}

// TestResponseLargeBodyGoesOutAsWritten: a body larger than the
// connection's buffer goes out as the handler writes it, as with
// net/http, not held until the handler returns: a client reads it all
// while the handler still runs (streaming, and no buffer growing with
// the body).
func TestResponseLargeBodyGoesOutAsWritten(t *testing.T) {
	const size = 64 << 10
	for _, which := range []string{"net/http", "front"} {
		t.Run(which, func(t *testing.T) {
			release := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", fmt.Sprint(size))
				writes(w, size, 16<<10)
				<-release
			})
			var addr string
			if which == "front" {
				_, _, addr = startFront(t, h, nil)
			} else {
				_, addr = startPlain(t, h, nil)
			}
			defer close(release)
			c := dial(t, addr)
			io.WriteString(c, get("/"))
			c.SetReadDeadline(time.Now().Add(silence))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no head while the handler runs: %v", err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			if n != size {
				t.Errorf("read %d bytes of the body while the handler runs, want %d (%v)", n, size, err)
			}
		})
	}
}

// TestResponseFlushSendsAtOnce: Flush sends the head and what was
// written so far while the handler still runs, as net/http's does
// (server-sent events, progress).
func TestResponseFlushSendsAtOnce(t *testing.T) {
	for _, which := range []string{"net/http", "front"} {
		t.Run(which, func(t *testing.T) {
			release := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "event one\n")
				if err := http.NewResponseController(w).Flush(); err != nil {
					panic(err)
				}
				<-release
			})
			var addr string
			if which == "front" {
				_, _, addr = startFront(t, h, nil)
			} else {
				_, addr = startPlain(t, h, nil)
			}
			defer close(release)
			c := dial(t, addr)
			io.WriteString(c, get("/"))
			c.SetReadDeadline(time.Now().Add(silence))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no head after Flush: %v", err)
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if line != "event one\n" {
				t.Errorf("read %q after Flush (%v), want the first event", line, err)
			}
		})
	}
}
