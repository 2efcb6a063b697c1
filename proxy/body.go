package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// A client that sends its request body slowly, or reads its response
// slowly, must not hold an upstream connection (or an upstream worker)
// for that long. As nginx does, limitproxy reads the whole body before it
// takes an upstream connection (request_buffering, on by default, and
// only the upstream's configuration turns it off), allows
// client_body_timeout between two reads of the body, min_body_rate over
// the whole of it (bodyrate.go) and send_timeout between two writes of
// the response, and answers a body it cannot read itself (400, 408, 413),
// never counting it against the upstream's health. An upstream that takes
// streamed bodies gets them from at most max_streams_per_key requests of
// one client key at once (streams.go).

// memoryBodyBytes is how much of a buffered request body is kept in
// memory; the rest goes to a temporary file. At most this much memory per
// request being read: with Go's default limits, a few thousand
// simultaneous uploads take a few hundred MiB at the very worst.
const memoryBodyBytes = 64 << 10

// deadliner is what net/http's ResponseWriters implement (HTTP/1 and
// HTTP/2 alike) to bound the reads of a request body and the writes of a
// response.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// clientBodyError is an error reading a client's request body: the
// client's fault, answered with status and never counted against an
// upstream.
type clientBodyError struct {
	status int
	err    error
}

func (e *clientBodyError) Error() string { return "request body: " + e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

// asClientBodyError classifies err, returned while reading a request body
// of at most max bytes: a timeout is 408, a body over max 413, anything
// else (malformed chunked encoding, a body shorter than its
// Content-Length, a reset) 400.
func asClientBodyError(err error) *clientBodyError {
	var ce *clientBodyError
	if errors.As(err, &ce) {
		return ce
	}
	var ne net.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &clientBodyError{http.StatusRequestEntityTooLarge, err}
	case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded):
		return &clientBodyError{http.StatusRequestTimeout, err}
	}
	return &clientBodyError{http.StatusBadRequest, err}
}

// write answers the client of r with e. Over HTTP/1 the connection is
// then closed (what is left of the body would be read as the next
// request); over HTTP/2 only the stream ends, and the client's other
// streams on the connection go on.
func (e *clientBodyError) write(w http.ResponseWriter, r *http.Request) {
	detail := "the request body could not be read"
	switch e.status {
	case http.StatusRequestTimeout:
		detail = "the request body did not arrive in time (client_body_timeout)"
		if errors.Is(e.err, errBodyTooSlow) {
			detail = "the request body arrived slower than the upstream accepts (min_body_rate)"
		}
	case http.StatusRequestEntityTooLarge:
		detail = "the request body is larger than the upstream accepts (max_body_bytes)"
	}
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	writeProblem(w, e.status, problem{Type: "about:blank", Title: http.StatusText(e.status), Status: e.status, Detail: detail})
}

// timedBody reads a request body with a deadline renewed before each read
// (client_body_timeout between two reads, as nginx's), at most max bytes,
// remembering the first error. It clears the deadline at the end of the
// body, so that the server's watch for a vanished client, which reads on,
// is not cut by it.
type timedBody struct {
	body    io.ReadCloser
	dl      deadliner // nil: no deadlines
	timeout time.Duration
	left    int64 // bytes still allowed
	max     int64
	err     *clientBodyError // the first read error, the client's
	rate    *rateWatch       // min_body_rate; nil: none
	// read counts the bytes read, for the access log (which may look
	// while the transport still reads a streamed body).
	read atomic.Int64
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.rate != nil {
		// Sets the read deadline too.
		if err := b.rate.begin(); err != nil {
			b.err = &clientBodyError{http.StatusRequestTimeout, err}
			return 0, b.err
		}
	} else if b.dl != nil {
		b.dl.SetReadDeadline(time.Now().Add(b.timeout))
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.body.Read(p)
	if b.rate != nil && b.rate.end(n) && err != nil && err != io.EOF {
		b.err = &clientBodyError{http.StatusRequestTimeout, errBodyTooSlow}
		return n, b.err
	}
	if int64(n) > b.left {
		n = int(b.left)
		b.err = &clientBodyError{http.StatusRequestEntityTooLarge, &http.MaxBytesError{Limit: b.max}}
		return n, b.err
	}
	b.left -= int64(n)
	b.read.Add(int64(n))
	switch {
	case err == io.EOF:
		b.stopRate()
		if b.dl != nil {
			b.dl.SetReadDeadline(time.Time{})
		}
	case err != nil:
		b.err = asClientBodyError(err)
		return n, b.err
	}
	return n, err
}

func (b *timedBody) Close() error {
	b.stopRate()
	return b.body.Close()
}

// bodyLimits are what prepareBody applies to one request.
type bodyLimits struct {
	buffer  bool          // read it all before forwarding
	max     int64         // bytes
	timeout time.Duration // between two reads
	minRate int64         // bytes a second over window; 0: none
	window  time.Duration
	dir     string // where a body too large for memory is spooled; "": os.TempDir()
}

// limitsFor returns the body limits of a request to the upstream u. Only
// the upstream's configuration decides whether a body streams: a request
// header (a gRPC Content-Type, say) never turns buffering off, since a
// client that could would hold an upstream connection as long as it
// trickles.
func limitsFor(u *config.Upstream, s *config.Server) bodyLimits {
	return bodyLimits{buffer: u.Buffering, max: u.MaxBodyBytes, timeout: s.ClientBodyTimeout,
		minRate: u.MinBodyRate, window: u.RateWindow}
}

// hasBody reports whether r has a request body to read.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// prepareBody readies r's body for forwarding under lim: refuses at once a
// body whose Content-Length is over the limit; wraps the body so that
// every read has a deadline and the limit holds; and with buffering, reads
// it all (into memory up to memoryBodyBytes, then into an unlinked
// temporary file) so that r carries a Content-Length and a body that is
// there already. A request without a body costs nothing. cleanup releases
// the buffer and must be called once the request is done; err is the
// client's, to answer with.
func prepareBody(x *exchange, r *http.Request, lim bodyLimits) (cleanup func(), err *clientBodyError) {
	var w http.ResponseWriter = &x.w
	if !hasBody(r) {
		return func() {}, nil
	}
	if r.ContentLength > lim.max {
		return func() {}, &clientBodyError{http.StatusRequestEntityTooLarge, &http.MaxBytesError{Limit: lim.max}}
	}
	tb := &timedBody{body: r.Body, timeout: lim.timeout, left: lim.max, max: lim.max}
	x.rec.readBody = tb
	if dl, ok := unwrapDeadliner(w); ok {
		tb.dl = dl
		// The server answers "Expect: 100-continue" itself when the body
		// is first read: no deadline left from an earlier response on
		// this connection may fail that write.
		dl.SetWriteDeadline(time.Time{})
	}
	if lim.minRate > 0 {
		tb.rate = &rateWatch{r: newBodyRate(lim.minRate, lim.window), now: time.Now, dl: tb.dl, timeout: lim.timeout}
	}
	if !lim.buffer {
		r.Body = tb
		return tb.stopRate, nil
	}
	defer tb.stopRate()
	var mem bytes.Buffer
	n, rerr := io.CopyN(&mem, tb, memoryBodyBytes+1)
	if rerr != nil && rerr != io.EOF {
		return func() {}, asClientBodyError(rerr)
	}
	if rerr == io.EOF {
		// All of it in memory.
		buf := mem.Bytes()
		setBody(r, int64(len(buf)), func() io.ReadCloser { return io.NopCloser(bytes.NewReader(buf)) })
		return func() {}, nil
	}
	f, ferr := os.CreateTemp(lim.dir, "limitproxy-body-*")
	if ferr != nil {
		return func() {}, &clientBodyError{http.StatusInternalServerError, ferr}
	}
	// Unlinked at once: the file goes with its descriptor, whatever
	// happens to the process.
	os.Remove(f.Name())
	cleanup = func() { f.Close() }
	if _, werr := f.Write(mem.Bytes()); werr != nil {
		cleanup()
		return func() {}, &clientBodyError{http.StatusInternalServerError, werr}
	}
	m, rerr := io.Copy(f, tb)
	if rerr != nil {
		cleanup()
		if tb.err != nil {
			return func() {}, tb.err
		}
		return func() {}, &clientBodyError{http.StatusInternalServerError, rerr}
	}
	size := n + m
	setBody(r, size, func() io.ReadCloser { return io.NopCloser(io.NewSectionReader(f, 0, size)) })
	return cleanup, nil
}

// stopRate stops b's min_body_rate watch, if any.
func (b *timedBody) stopRate() {
	if b.rate != nil {
		b.rate.stop()
	}
}

// setBody gives r a body of size bytes that get makes afresh (so that the
// Transport can send it again on a retry).
func setBody(r *http.Request, size int64, get func() io.ReadCloser) {
	r.Body = get()
	r.GetBody = func() (io.ReadCloser, error) { return get(), nil }
	r.ContentLength = size
	r.TransferEncoding = nil
}

// unwrapDeadliner finds the deadliner under w's wrappers (as
// http.ResponseController does).
func unwrapDeadliner(w http.ResponseWriter) (deadliner, bool) { return unwrapTo[deadliner](w) }

// unwrapTo returns the first of w and the writers it wraps (through
// Unwrap, as http.ResponseController follows them) that is a T.
func unwrapTo[T any](w http.ResponseWriter) (T, bool) {
	for {
		if t, ok := w.(T); ok {
			return t, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			var zero T
			return zero, false
		}
		w = u.Unwrap()
	}
}
